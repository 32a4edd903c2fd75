"""The automatic prefix cache of a Chat Completions server, so its share can be measured offline.

Owns `ChatPrefixCache` and `least_chat_reads`. When a `FakeProvider` is given a
`ChatPrefixCache` (`chat_prompt_cache`), every answered chat request reports the usage such a
server would: `prompt_tokens_details.cached_tokens` for the longest prefix of its prompt an
earlier request to the same model sent, `prompt_tokens` for the whole prompt.

The rules it follows (OpenAI's documented prompt caching; DeepSeek's and vLLM's prefix caches
work alike, in other units):
- No breakpoints, nothing to ask: every request's prompt is remembered, at each message
  boundary, for its model. The prefix is ordered tools → messages; the request's parameters
  (`reasoning_effort`, `max_tokens`...) are no part of it.
- A hit is the longest remembered prefix of whole messages, counted only when it is at least
  `min_tokens` long (1,024), and then in steps of `step_tokens` (128) beyond them.
- An entry lives `ttl` seconds from its last write or hit. Writing costs nothing extra;
  reading costs `read_price` of an input token (0.5: OpenAI's discount for most models).

`least_chat_reads` gives, for a sequence of requests, the most each could have read: the
longest prefix of whole messages an earlier request of its model sent, unrounded and never
expired: the floor a share is measured against.

Invariant: the counts are the fake's estimate (canonical JSON bytes / 4, per tool and per
message), as `cache.py` counts the Messages wire, so the two wires' shares compare.

Why a module beside `cache.py`: the two caches follow different rules (breakpoints and a
look-back there; none here), and the Messages wire's must not grow this one's exceptions.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from defect_fakeapi.cache import CacheUsage

__all__ = ["ChatPrefixCache", "least_chat_reads", "prompt_prefixes"]

DEFAULT_MIN_TOKENS = 1024
DEFAULT_STEP_TOKENS = 128
DEFAULT_TTL_SECONDS = 300.0
DEFAULT_READ_PRICE = 0.5


def prompt_prefixes(body: Mapping[str, Any]) -> list[tuple[bytes, int]]:
    """Each prefix of `body`'s prompt ending at a message: its digest (with the model) and
    its length in tokens, shortest first; the last is the whole prompt."""
    running = hashlib.sha256(str(body.get("model", "")).encode())
    total = 0
    for tool in body.get("tools") or []:
        canonical = _canonical({"tool": tool})
        running.update(canonical)
        total += max(1, len(canonical) // 4)
    prefixes: list[tuple[bytes, int]] = []
    for message in body.get("messages") or []:
        canonical = _canonical({"message": message})
        running.update(canonical)
        total += max(1, len(canonical) // 4)
        prefixes.append((running.copy().digest(), total))
    return prefixes


class ChatPrefixCache:
    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        min_tokens: int = DEFAULT_MIN_TOKENS,
        step_tokens: int = DEFAULT_STEP_TOKENS,
        read_price: float = DEFAULT_READ_PRICE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.min_tokens = min_tokens
        self.step_tokens = step_tokens
        self.read_price = read_price
        self._clock = clock
        self._entries: dict[bytes, float] = {}
        self._lock = threading.Lock()

    def account(self, body: Mapping[str, Any]) -> CacheUsage:
        """The usage of one request (its model is `body["model"]`), remembering its prompt."""
        prefixes = prompt_prefixes(body)
        total = prefixes[-1][1] if prefixes else 0
        with self._lock:
            now = self._clock()
            seen = 0
            for digest, tokens in reversed(prefixes):
                expiry = self._entries.get(digest)
                if expiry is not None and expiry > now:
                    seen = tokens
                    self._entries[digest] = now + self.ttl
                    break
            for digest, _ in prefixes:
                self._entries[digest] = now + self.ttl
        read = self.rounded(seen)
        return CacheUsage(total - read, 0, read)

    def rounded(self, tokens: int) -> int:
        """What a hit of `tokens` counts: nothing under the minimum, else whole steps."""
        if tokens < self.min_tokens:
            return 0
        return self.min_tokens + (tokens - self.min_tokens) // self.step_tokens * self.step_tokens


def least_chat_reads(bodies: Sequence[Mapping[str, Any]]) -> list[int]:
    """For each body, sent in order, the longest prefix of whole messages an earlier body of
    the same model sent (its digests include the model): the most it could read."""
    seen: set[bytes] = set()
    reads = []
    for body in bodies:
        prefixes = prompt_prefixes(body)
        reads.append(max((tokens for digest, tokens in prefixes if digest in seen), default=0))
        seen.update(digest for digest, _ in prefixes)
    return reads


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
