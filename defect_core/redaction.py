"""Secret-looking values out of text: what a process printed, a command line, a URL.

Owns `redact` (a text with every secret-looking value replaced by `REDACTED`),
`remember_secret` / `hide_remembered` (the secrets this process read from the stored
credentials, `config/credentials.py`, hidden wherever they would appear: the log's formatter
and `redact` both use them),
`redact_args` (a command line's arguments, for a record) and `redact_url` (a URL without
its credentials, query values or fragment, for a record).

What counts as a secret in a text (`redact`):
- the secrets the process remembered (`remember_secret`: every stored credential it read);
- the values the caller knows are secrets (`known`: the values of defect's secret
  environment variables, `child_env.EnvPolicy.secret_values`, and a server's own `env` and
  header values), wherever they appear;
- well-known token shapes: `ghp_…` (and GitHub's other prefixes), `github_pat_…`, `sk-…`,
  `sk-ant-…`, `xox…-` (Slack), `AKIA…`/`ASIA…` (AWS), `glpat-…` (GitLab);
- the value of an assignment whose name says secret: `token=…`, `password: …`,
  `"api_key": "…"`, `GITHUB_TOKEN=…`, `Authorization: Bearer …`;
- `Bearer …` / `Basic …` credentials, and the password of a URL (`https://u:PASS@host`);
- a long high-entropy string following `key`, `secret` or `token` (`--token 8f2…`).

Invariants:
- Over-redaction is the safe failure: a word after `token:` in an error message may go, a
  secret may not stay. `redact` is idempotent, and leaves text without secrets unchanged.
- Pure and standard library only, in the lowest layer: the MCP connection redacts a failing
  server's stderr with it before the line is logged or kept (`mcp/connection.py`), and the
  store keeps an MCP server's arguments and URL through `redact_args` / `redact_url`
  (`store/records.py`, `stored_mcp_server`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qsl, urlsplit

__all__ = [
    "REDACTED",
    "hide_remembered",
    "high_entropy",
    "redact",
    "redact_args",
    "redact_url",
    "remember_secret",
]

REDACTED = "[redacted]"

_MIN_KNOWN = 6
"""A known value shorter than this is not redacted (`1`, `true` would garble the text)."""

_REMEMBERED: set[str] = set()
"""Secrets read by this process from the stored credentials (`remember_secret`)."""


def remember_secret(value: str) -> None:
    """Hide `value` from now on wherever `redact` or `hide_remembered` looks."""
    if len(value) >= _MIN_KNOWN:
        _REMEMBERED.add(value)


def hide_remembered(text: str) -> str:
    """`text` with every remembered secret replaced by `REDACTED` (the identity, and cheap,
    when none was remembered: the log calls it on every line)."""
    for value in sorted(_REMEMBERED, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


_TOKEN_SHAPES = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{8,}"
    r"|github_pat_[A-Za-z0-9_]{16,}"
    r"|sk-ant-[A-Za-z0-9_\-]{6,}"
    r"|sk-[A-Za-z0-9_\-]{16,}"
    r"|xox[abposre]-[A-Za-z0-9\-]{8,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|glpat-[A-Za-z0-9_\-]{16,})"
)
_SECRET_WORD = (
    r"(?:token|secret|passw(?:or)?d|passphrase|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|client[_-]?secret|credentials?|authorization|auth)s?"
)
_ASSIGNMENT = re.compile(
    r"(?P<name>(?P<q>[\"']?)[A-Za-z0-9_.\-]*" + _SECRET_WORD + r"(?P=q))"
    r"(?P<sep>\s*[:=]\s*)"
    r"(?:(?P<open>[\"'])[^\"'\n]*(?P=open)"
    r"|(?!\[redacted\])(?:(?:Bearer|Basic|Token)\s+)?[^\s\"'&,;)\]}>]+)",
    re.IGNORECASE,
)
_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Basic)\s+(?P<value>[A-Za-z0-9._~+/=\-]{6,})")
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s/:@]*:)[^\s/@]+@")
_AFTER_WORD = re.compile(
    r"(?P<head>\b(?:key|secret|token)s?\b[\"']?(?:\s*[:=]\s*|\s+)[\"']?)"
    r"(?P<value>[A-Za-z0-9+_\-.=~][A-Za-z0-9+/_\-.=~]{15,})",
    re.IGNORECASE,
)
_SECRET_FLAG = re.compile(r"-{1,2}[A-Za-z0-9_\-]*(?:" + _SECRET_WORD + r"|key)", re.IGNORECASE)


def high_entropy(text: str, min_length: int = 16) -> bool:
    """Does `text` look like a random token: long, of two character classes or more, and
    varied (at least 3 bits of Shannon entropy per character)?"""
    if len(text) < min_length:
        return False
    classes = sum(
        (
            any(c.islower() for c in text),
            any(c.isupper() for c in text),
            any(c.isdigit() for c in text),
        )
    )
    if classes < 2:
        return False
    counts = Counter(text)
    entropy = -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())
    return entropy >= 3.0


def redact(text: str, known: Iterable[str] = ()) -> str:
    """`text` with every secret-looking value replaced by `REDACTED` (see the module)."""
    values = sorted(
        {v for v in (*known, *_REMEMBERED) if len(v) >= _MIN_KNOWN}, key=len, reverse=True
    )
    if values:
        text = re.sub("|".join(re.escape(v) for v in values), REDACTED, text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + "@", text)
    text = _ASSIGNMENT.sub(_assignment, text)
    text = _SCHEME.sub(lambda m: f"{m.group('scheme')} {REDACTED}", text)
    return _AFTER_WORD.sub(_after_word, text)


def _assignment(match: re.Match[str]) -> str:
    quote = match.group("open") or ""
    return match.group("name") + match.group("sep") + quote + REDACTED + quote


def _after_word(match: re.Match[str]) -> str:
    value = match.group("value")
    return match.group("head") + REDACTED if high_entropy(value) else match.group(0)


def redact_args(args: Sequence[str]) -> list[str]:
    """A command line's arguments for a record: each one through `redact`, the value after a
    flag that names a secret (`--token VALUE`, `--api-key VALUE`) replaced, and any argument
    that looks like a random token on its own (long, varied, not a path) replaced too."""
    kept: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            kept.append(REDACTED)
            hide_next = False
            continue
        if _SECRET_FLAG.fullmatch(arg):
            kept.append(arg)
            hide_next = True
            continue
        text = redact(arg)
        if text == arg and "/" not in arg and "\\" not in arg and high_entropy(arg, 20):
            text = REDACTED
        kept.append(text)
    return kept


def redact_url(url: str) -> str:
    """`url` for a record: scheme, host, port and path (through `redact`); no user or
    password, the query's names with their values replaced, no fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    if not parts.scheme or not host:
        return redact(url)
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    path = "/".join(
        REDACTED if high_entropy(segment, 20) else segment
        for segment in redact(parts.path).split("/")
    )
    query = "&".join(
        f"{name}={REDACTED}" for name, _ in parse_qsl(parts.query, keep_blank_values=True)
    )
    return f"{parts.scheme}://{netloc}{path}" + (f"?{query}" if query else "")
