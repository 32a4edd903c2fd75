"""A prompt cache that behaves like the Anthropic API's, so cost can be measured offline.

Owns `PromptCache` and `CacheUsage`. When a `FakeProvider` is given a `PromptCache`, every
answered request reports the `usage` the real API would: `cache_read_input_tokens` for the
longest cached prefix found, `cache_creation_input_tokens` for the prefix written at the
request's breakpoints, and `input_tokens` for the rest.

The rules it follows (the API's documented prompt caching):
- The prefix is ordered tools → system → messages; a block with `cache_control` is a
  breakpoint, and a top-level `cache_control` is one on the last block (automatic caching).
- A cache entry is the exact prefix up to a breakpoint, for one model. A lookup at each
  breakpoint also tries the block boundaries before it, `LOOKBACK_BLOCKS` content blocks in
  all; the longest hit wins. Entries exist only where some request put a breakpoint.
- Changing the thinking or tool-choice parameters keeps the tools and system cached but not
  the messages (they sit between the two, as a segment of their own).
- A prefix shorter than the model's minimum cacheable length is never cached (1,024 tokens
  for most models, 2,048 or 4,096 for some: `minimum_cacheable_tokens`; `min_tokens` sets
  another figure or rule); an entry lives `ttl` seconds from its last write or hit.
- Writing costs 1.25× an input token, reading 0.1× (`cost_ratio`).

`least_usages` gives, for a sequence of requests, the least each could have paid under the
same rules with ideal breakpoints and foresight: the floor a client's cost is measured against.

Tokens are the fake's estimate (`script.estimate_tokens`: canonical JSON bytes / 4), counted
per block, so the figures are comparable between runs, not with the real tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LOOKBACK_BLOCKS = 20
DEFAULT_TTL_SECONDS = 300.0
DEFAULT_MIN_TOKENS = 1024
MIN_TOKENS_BY_MODEL: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-6", 4096),
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
)
"""The documented minimum cacheable prefix of the models that differ from the default (model
id prefixes); any other model: `DEFAULT_MIN_TOKENS`."""
WRITE_PRICE = 1.25
READ_PRICE = 0.1


@dataclass(frozen=True, slots=True)
class CacheUsage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def cost_ratio(self) -> float:
        """What the request cost relative to the same tokens sent uncached."""
        if not self.total:
            return 1.0
        paid = (
            self.input_tokens
            + WRITE_PRICE * self.cache_creation_input_tokens
            + READ_PRICE * self.cache_read_input_tokens
        )
        return paid / self.total


@dataclass(frozen=True, slots=True)
class _Segment:
    tokens: int
    breakpoint: bool
    canonical: bytes
    block: bool = True
    """A content block (counted by the look-back); False for the request parameters."""


def minimum_cacheable_tokens(model: str) -> int:
    """The shortest prefix `model` caches, as the API documents it per model."""
    for prefix, tokens in MIN_TOKENS_BY_MODEL:
        if model.startswith(prefix):
            return tokens
    return DEFAULT_MIN_TOKENS


class PromptCache:
    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        min_tokens: int | Callable[[str], int] = minimum_cacheable_tokens,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`min_tokens`: the minimum cacheable length, one figure for every model or a rule
        from the model id (by default the API's documented one per model)."""
        self.ttl = ttl
        self.min_tokens = min_tokens
        self._clock = clock
        self._entries: dict[tuple[str, bytes], float] = {}
        self._lock = threading.Lock()

    def account(self, body: Mapping[str, Any], model: str) -> CacheUsage:
        """The usage of one request, updating the cache as the API would."""
        segments = list(_segments(body))
        if body.get("cache_control") is not None and segments:
            last = segments[-1]
            segments[-1] = _Segment(last.tokens, True, last.canonical, last.block)
        minimum = self.min_tokens if isinstance(self.min_tokens, int) else self.min_tokens(model)
        digests: list[bytes] = []
        cumulative: list[int] = []
        running = hashlib.sha256(model.encode())
        total = 0
        for segment in segments:
            running.update(segment.canonical)
            digests.append(running.copy().digest())
            total += segment.tokens
            cumulative.append(total)
        breakpoints = [i for i, s in enumerate(segments) if s.breakpoint]
        with self._lock:
            now = self._clock()
            hit = -1
            for b in breakpoints:
                tried = 0
                for j in range(b, -1, -1):
                    if not segments[j].block:
                        continue
                    expiry = self._entries.get((model, digests[j]))
                    if expiry is not None and expiry > now:
                        hit = max(hit, j)
                        break
                    tried += 1
                    if tried >= LOOKBACK_BLOCKS:
                        break
            if hit >= 0:
                self._entries[(model, digests[hit])] = now + self.ttl
            read = cumulative[hit] if hit >= 0 else 0
            written = 0
            for b in breakpoints:
                if cumulative[b] >= minimum:
                    self._entries[(model, digests[b])] = now + self.ttl
                    written = max(written, cumulative[b])
        creation = max(0, written - read)
        return CacheUsage(total - read - creation, creation, read)


def least_usages(
    requests: Sequence[tuple[Mapping[str, Any], str]],
    *,
    min_tokens: int | Callable[[str], int] = minimum_cacheable_tokens,
) -> list[CacheUsage]:
    """The least each of `requests` (body, model), sent in order, could pay: it reads the
    longest prefix an earlier request of the same model sent (as if a breakpoint sat on every
    block and nothing expired), writes what a later request reads beyond that, and sends the
    rest uncached. What no breakpoint placement can save: a prefix seen for the first time
    (the first request, a new model or thinking setting, a rewritten history) is paid for."""
    prefixes: list[tuple[str, dict[bytes, int], int]] = []
    for body, model in requests:
        running = hashlib.sha256(model.encode())
        lengths: dict[bytes, int] = {}
        total = 0
        for segment in _segments(body):
            running.update(segment.canonical)
            total += segment.tokens
            lengths[running.copy().digest()] = total
        prefixes.append((model, lengths, total))

    def shared(index: int, others: range) -> int:
        model, lengths, _ = prefixes[index]
        minimum = min_tokens if isinstance(min_tokens, int) else min_tokens(model)
        longest = 0
        for other in others:
            if prefixes[other][0] == model:
                common = lengths.keys() & prefixes[other][1].keys()
                longest = max([longest, *(lengths[d] for d in common)])
        return longest if longest >= minimum else 0

    usages = []
    for index, (_, _, total) in enumerate(prefixes):
        read = shared(index, range(index))
        written = max(0, shared(index, range(index + 1, len(prefixes))) - read)
        usages.append(CacheUsage(total - read - written, written, read))
    return usages


def _segments(body: Mapping[str, Any]) -> Iterator[_Segment]:
    for tool in body.get("tools") or []:
        yield _segment({"tool": tool}, tool)
    system = body.get("system")
    if isinstance(system, str) and system:
        yield _segment({"system": system}, {})
    elif isinstance(system, list):
        for block in system:
            yield _segment({"system": block}, block)
    parameters = {key: body.get(key) for key in ("thinking", "tool_choice")}
    yield _Segment(0, False, _canonical({"parameters": parameters}), block=False)
    for message in body.get("messages") or []:
        content = message.get("content")
        role = message.get("role")
        if isinstance(content, str):
            yield _segment({"role": role, "text": content}, {})
            continue
        for block in content or []:
            yield _segment({"role": role, "block": block}, block)


def _segment(what: Mapping[str, Any], block: Any) -> _Segment:
    canonical = _canonical(_without_cache_control(what))
    return _Segment(max(1, len(canonical) // 4), _marked(block), canonical)


def _marked(block: Any) -> bool:
    """A breakpoint: the block carries `cache_control`, or (a tool result) one of its parts."""
    if not isinstance(block, Mapping):
        return False
    if block.get("cache_control") is not None:
        return True
    content = block.get("content") if block.get("type") == "tool_result" else None
    return isinstance(content, list) and any(
        isinstance(part, Mapping) and part.get("cache_control") is not None for part in content
    )


def _without_cache_control(value: Any) -> Any:
    """The prefix's content: where a breakpoint sits does not change what is cached."""
    if isinstance(value, Mapping):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
