"""The `fetch` tool: GET one http(s) URL and give the model its content as Markdown or text.

Owns the request loop (redirects followed by hand, each hop vetted by `NetGuard`), the
download cap, the timeout, and what the model sees (a header line, the converted body cut to
a budget, and notes saying what was cut and how to get more). Conversion lives in
`defect_core/tools/webtext.py`, the address rules in `defect_core/tools/netguard.py`.

Invariants:
- Every connection goes to an address `NetGuard.vet` returned for that hop: the request URL
  carries the vetted IP while the Host header and the TLS server name (`sni_hostname`) keep
  the original host, so certificates are checked against the host and no second DNS lookup
  happens between the check and the connection. Proxies from the environment are not used
  (they would dial a host nobody vetted).
- At most `MAX_REDIRECTS` redirects; each target is checked again (scheme and address).
- At most `max_bytes` of the (decompressed) body are read, chunk by chunk with a bounded
  decompressor, so neither a huge body nor a compression bomb ever sits in memory; the whole
  fetch (connect, redirects, body) ends after `timeout` seconds.
- Binary content is refused from its headers (or its first bytes when unlabelled) before the
  rest is downloaded.
- `httpx2` and the HTML converter are imported when a fetch runs, never at start-up.

Permissions: safety is `MUTATING` (kind `fetch`), like `bash`: outside yolo mode the user is
asked (in `ask` and `accept-edits`), `read-only` refuses it. "Always allow" is remembered
per host (`permission_key`: `host`, or `host:port` for a port that is not the scheme's
default), never per URL.
"""

from __future__ import annotations

import ssl
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import Field

from defect_core.events import TextDisplay, ToolKind
from defect_core.tools import webtext
from defect_core.tools.base import (
    ModelTool,
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
    clip_title,
)
from defect_core.tools.netguard import NetGuard, Resolver, system_resolve
from defect_core.tools.shown import fenced, visible
from defect_core.tools.workspace import ToolArgs, parse_args

if TYPE_CHECKING:
    import httpx2

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
MAX_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 120.0
MAX_REDIRECTS = 5
MAX_RESULT_CHARS = 40_000
"""What one call returns to the model of the converted body; `offset` reads further."""
USER_AGENT = "defect-fetch/0.1 (+https://agentclientprotocol.com; a coding agent)"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}


class FetchArgs(ToolArgs):
    url: str = Field(min_length=1, description="The http:// or https:// URL to GET.")
    format: Literal["markdown", "text", "raw"] = Field(
        default="markdown",
        description="How HTML comes back: markdown (the default), text (readable text) or raw "
        "(the body as is).",
    )
    max_bytes: int = Field(
        default=DEFAULT_MAX_BYTES,
        ge=1,
        le=MAX_MAX_BYTES,
        description="Download at most this many bytes of the body.",
    )
    offset: int = Field(
        default=0,
        ge=0,
        description="Start at this character of the converted content (to read the part "
        "after a cut).",
    )
    timeout: float = Field(
        default=DEFAULT_TIMEOUT,
        gt=0,
        le=MAX_TIMEOUT,
        description="Seconds before the fetch is given up.",
    )


@dataclass(frozen=True, slots=True)
class Page:
    """One fetched response, the body cut at the download cap."""

    url: str
    status: int
    reason: str
    content_type: str | None
    body: bytes
    cut_at: int | None
    """The download cap when the body went on past it (None: the whole body was read)."""
    redirects: tuple[str, ...]


class FetchTool(ModelTool):
    """GETs a URL through `NetGuard` (see the module docstring)."""

    args_model = FetchArgs

    def __init__(
        self, resolve: Resolver = system_resolve, verify: ssl.SSLContext | None = None
    ) -> None:
        self._resolve = resolve
        self._verify = verify
        """Trusted certificates (None: the system's); tests pass their own authority."""

    @property
    def name(self) -> str:
        return "fetch"

    @property
    def description(self) -> str:
        return (
            "Fetch a web page or file over http(s) (GET) and return its content: HTML as "
            "Markdown (or readable text, or raw), JSON and plain text as they are. Binary "
            "content (images, PDFs, archives) is refused. Only public addresses are reachable "
            "unless the user allowed a host. Long content is cut; the note at the end says "
            "which `offset` reads the rest."
        )

    @property
    def safety(self) -> Safety:
        return Safety.MUTATING

    @property
    def kind(self) -> ToolKind:
        return "fetch"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        url = args.get("url") if isinstance(args, dict) else None
        if not isinstance(url, str) or not url.strip():
            return ToolCallView(title="Fetch a URL", kind=self.kind)
        title = clip_title(url, more="full URL below")
        shown = visible(url.strip())
        content = (TextDisplay(fenced(shown)),) if title != shown else ()
        return ToolCallView(title=f"Fetch {title}", kind=self.kind, content=content)

    def permission_key(self, args: dict[str, Any]) -> str:
        url = args.get("url") if isinstance(args, dict) else None
        return host_key(url) if isinstance(url, str) else self.name

    def protected(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """Never: a fetch writes nothing in the workspace, and a URL is not a path."""
        return None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        guard = NetGuard(ctx.fetch_allow, self._resolve)
        timeout, max_bytes = a.timeout, a.max_bytes
        try:
            with anyio.fail_after(timeout):
                page = await fetch_page(a.url.strip(), guard, max_bytes, timeout, self._verify)
        except TimeoutError:
            raise ToolError(
                f"timed out after {timeout:g} s fetching {a.url} (the server is slow or "
                f"does not answer; a larger `timeout`, at most {MAX_TIMEOUT:g}, may help)"
            ) from None
        text = webtext.render(page.body, page.content_type, a.format, page.url)
        return _result(page, text, a.offset, max_bytes)


def host_key(url: str) -> str:
    """`host` (or `host:port` off the scheme's default port) of `url`, lower case."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".")
        port = parts.port
    except ValueError:
        return "fetch"
    if not host:
        return "fetch"
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        return f"{host}:{port}"
    return host


def _parse_url(raw: str) -> httpx2.URL:
    import httpx2

    try:
        url = httpx2.URL(raw)
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise ToolError(f"not a valid URL: {raw} ({exc})") from None
    if url.scheme not in _DEFAULT_PORTS:
        raise ToolError(
            f"fetch only takes http:// and https:// URLs, not {url.scheme or 'a bare'}: {raw}"
        )
    if not url.host:
        raise ToolError(f"the URL has no host: {raw}")
    return url.copy_with(fragment=None)


async def fetch_page(
    raw_url: str,
    guard: NetGuard,
    max_bytes: int,
    io_timeout: float,
    verify: ssl.SSLContext | None = None,
) -> Page:
    """GET `raw_url`, following redirects by hand through `guard` (see the module docstring)."""
    import httpx2

    url = _parse_url(raw_url)
    hops: list[str] = []
    # No kept-alive connections: a TLS connection verified for one host must never carry a
    # redirected request for another host that happens to share the address.
    async with httpx2.AsyncClient(
        trust_env=False,
        follow_redirects=False,
        timeout=httpx2.Timeout(io_timeout),
        limits=httpx2.Limits(max_keepalive_connections=0),
        verify=True if verify is None else verify,
    ) as client:
        for _ in range(MAX_REDIRECTS + 1):
            port = url.port or _DEFAULT_PORTS[url.scheme]
            target = await guard.vet(url.raw_host.decode("ascii"), port)
            request = client.build_request(
                "GET",
                url.copy_with(host=target.address),
                headers={
                    "Host": _host_header(url),
                    "User-Agent": USER_AGENT,
                    "Accept": "text/html, text/markdown, text/plain, application/json;q=0.9, "
                    "*/*;q=0.5",
                    "Accept-Encoding": "gzip",
                },
                extensions={"sni_hostname": target.host} if url.scheme == "https" else {},
            )
            try:
                response = await client.send(request, stream=True)
            except httpx2.HTTPError as exc:
                raise ToolError(f"could not fetch {url}: {_describe_error(exc)}") from None
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    hops.append(str(url))
                    try:
                        url = _parse_url(str(url.join(location.strip())))
                    except httpx2.InvalidURL as exc:
                        raise ToolError(f"{url} redirects to an invalid URL: {exc}") from None
                    continue
                body, cut_at = await _read_body(response, max_bytes, str(url))
            except httpx2.HTTPError as exc:
                raise ToolError(f"could not fetch {url}: {_describe_error(exc)}") from None
            finally:
                await response.aclose()
            return Page(
                url=str(url),
                status=response.status_code,
                reason=response.reason_phrase,
                content_type=response.headers.get("content-type"),
                body=body,
                cut_at=cut_at,
                redirects=tuple(hops),
            )
    chain = " → ".join([*hops, str(url)])
    raise ToolError(f"too many redirects (more than {MAX_REDIRECTS}): {chain}")


def _host_header(url: httpx2.URL) -> str:
    host = url.raw_host.decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    if url.port is not None and url.port != _DEFAULT_PORTS[url.scheme]:
        host += f":{url.port}"
    return host


def _describe_error(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


class _Decoder:
    """Content-Encoding undone chunk by chunk, never producing more than asked for."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._z = None
        elif encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise ToolError(f"the server sent an encoding fetch cannot read: {encoding}")

    def feed(self, data: bytes, limit: int) -> bytes:
        """Up to `limit` decoded bytes of `data` (more may remain: see `overflowed`)."""
        if self._z is None:
            return data[:limit]
        try:
            out = self._z.decompress(data, limit)
        except zlib.error as exc:
            raise ToolError(f"the body is not valid compressed data: {exc}") from None
        return out

    def overflowed(self, data: bytes, limit: int) -> bool:
        return len(data) > limit if self._z is None else bool(self._z.unconsumed_tail)


async def _read_body(
    response: httpx2.Response, max_bytes: int, url: str
) -> tuple[bytes, int | None]:
    """The body up to `max_bytes`; refused when it is binary. (body, cap if it was cut)."""
    content_type = response.headers.get("content-type")
    kind = webtext.classify(content_type)
    if kind == "binary":
        raise ToolError(_binary_refusal(url, content_type, response.headers))
    decoder = _Decoder(response.headers.get("content-encoding", ""))
    parts: list[bytes] = []
    size = 0
    cut = False
    async for raw in response.aiter_raw():
        room = max_bytes - size
        data = decoder.feed(raw, room + 1)
        if len(data) > room or decoder.overflowed(raw, room):
            parts.append(data[:room])
            size += min(len(data), room)
            cut = True
            break
        parts.append(data)
        size += len(data)
        if kind is None and size >= webtext.SNIFF_BYTES:
            kind = webtext.classify(content_type, b"".join(parts))
            if kind == "binary":
                raise ToolError(_binary_refusal(url, content_type, response.headers))
    body = b"".join(parts)
    if kind is None and webtext.classify(content_type, body) == "binary":
        raise ToolError(_binary_refusal(url, content_type, response.headers))
    return body, (max_bytes if cut else None)


def _binary_refusal(url: str, content_type: str | None, headers: httpx2.Headers) -> str:
    size = headers.get("content-length")
    what = webtext.media_type(content_type) or "no content type, and the bytes are not text"
    sized = f", {size} bytes" if size and size.isdigit() else ""
    return (
        f"refused: {url} is binary content ({what}{sized}); fetch returns text only "
        "(HTML, JSON, plain text)."
    )


def _result(page: Page, text: str, offset: int, max_bytes: int) -> ToolOutput:
    """What the model reads: a header line, the part of `text` from `offset` within the
    budget, and a note for every cut (characters not shown, bytes not downloaded)."""
    details = [webtext.media_type(page.content_type) or "no content type"]
    details.append(f"{len(page.body)} bytes")
    if page.redirects:
        details.append(f"redirected from {page.redirects[0]}")
    header = f"{page.url} — HTTP {page.status} {page.reason}".rstrip()
    header += f" ({', '.join(details)})"
    notes: list[str] = []
    total = len(text)
    end = min(total, offset + MAX_RESULT_CHARS)
    if offset and offset >= total:
        piece = ""
        notes.append(f"[offset {offset} is past the end: the content has {total} characters]")
    else:
        piece = text[offset:end] if end < total else text[offset:].rstrip()
        if offset or end < total:
            notes.append(f"[showing characters {offset}–{end} of {total}]")
        if end < total:
            notes.append(
                f"[truncated: {total - end} more characters were cut; call fetch again with "
                f'the same url and "offset": {end} to read on]'
            )
    if page.cut_at is not None:
        more = (
            f'; pass a larger "max_bytes" (at most {MAX_MAX_BYTES}) to download more'
            if max_bytes < MAX_MAX_BYTES
            else ""
        )
        notes.append(
            f"[download cap: the body is longer than {page.cut_at} bytes; only the first "
            f"{page.cut_at} were downloaded and the rest was not read{more}]"
        )
    body = piece if piece.strip() else "" if notes else "(empty body)"
    content = "\n\n".join(p for p in (header, body, "\n".join(notes)) if p)
    summary = " ".join([f"{header}: {len(piece)} characters returned.", *notes])
    return ToolOutput(
        content=content,
        is_error=page.status >= 400,
        display=(TextDisplay(summary),),
        raw_output={
            "url": page.url,
            "status": page.status,
            "content_type": page.content_type,
            "bytes": len(page.body),
            "truncated": page.cut_at is not None or end < total,
        },
    )
