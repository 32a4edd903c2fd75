"""Whether the Messages API would take an image or a document, judged before it is sent.

Owns the checks on inline media: `image_problem` (base64 image data), `image_url_problem`
(an image by URL), `document_problem` (a base64 document such as a PDF) and
`image_block_problem`, the memoised form of the first two for an `ImageBlock`. Each returns
None when the API would take the media, else one short phrase saying why not (e.g.
"not a valid PNG"), fit to follow "image: " in an error or to sit in a placeholder.

Invariant: the checks read headers only (magic bytes, PNG `IHDR`, GIF screen descriptor,
JPEG start-of-frame, WebP `VP8 `/`VP8L`/`VP8X`), never decode pixels, and import nothing
heavy: the ACP bridge calls them on the `session/prompt` path.

Why: an image the API refuses is stored with the conversation and sent again with every
later request, so one bad image answers every prompt of the session with the same 400 - a dead
session. The bridge refuses such an image when it arrives (`defect_acp/params.py`), and
`repair_outbound` (`defect_core/integrity/`) replaces one already stored - by an older
defect, or from a tool result - with a text placeholder on the copy it sends.

The limits are the API's: PNG, JPEG, GIF or WebP; at most 5 MB, which the API measures on the
base64 text (its 400 reads `image exceeds 5 MB maximum: 5577016 bytes > 5242880 bytes` for a
4.2 MB file); at most 8000 pixels a side; the declared media type must be the one the bytes
are. Base64 is read strictly (standard alphabet, padding, no whitespace).
"""

from __future__ import annotations

import binascii
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from defect_core.model import ImageBlock

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGE_BASE64_BYTES",
    "MAX_IMAGE_SIDE",
    "document_problem",
    "image_block_problem",
    "image_problem",
    "image_url_problem",
    "sniff_image",
]

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The media types the Messages API takes for an inline image."""

MAX_IMAGE_BASE64_BYTES = 5 * 1024 * 1024
"""The API's per-image limit, on the base64 text."""

MAX_IMAGE_SIDE = 8000
"""The API's limit on either dimension, in pixels."""

_NAMES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}

# JPEG start-of-frame markers (they carry the dimensions): C0-CF except DHT (C4), JPG (C8)
# and DAC (CC).
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field: TEM, RST0-7, SOI.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8), 0xD8})


def image_problem(media_type: str | None, data: str) -> str | None:
    """Why the API would refuse this base64 image, or None when it would take it."""
    if media_type not in _NAMES:
        return f"type {media_type!r} is not supported (PNG, JPEG, GIF or WebP)"
    if not data:
        return "empty"
    if len(data) > MAX_IMAGE_BASE64_BYTES:
        return f"larger than 5 MB ({len(data)} bytes of base64)"
    raw = _decode(data)
    if raw is None:
        return "not valid base64"
    name = _NAMES[media_type]
    found = sniff_image(raw)
    if found is None:
        return f"not a valid {name}"
    kind, width, height = found
    if kind != media_type:
        return f"not a valid {name} (the bytes are a {_NAMES[kind]})"
    if width > MAX_IMAGE_SIDE or height > MAX_IMAGE_SIDE:
        return f"{width}x{height} pixels, over the {MAX_IMAGE_SIDE}-pixel limit"
    return None


def image_url_problem(url: str) -> str | None:
    """Why the API would refuse an image by this URL (it fetches http(s) URLs only)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.strip():
        return "not an http(s) URL"
    return None


def document_problem(media_type: str | None, data: str) -> str | None:
    """Why this base64 document is unusable (invalid base64; a PDF without `%PDF-`)."""
    raw = _decode(data)
    if raw is None:
        return "not valid base64"
    if media_type == "application/pdf" and not raw.startswith(b"%PDF-"):
        return "not a valid PDF"
    return None


_verdicts: dict[int, tuple[weakref.ref[ImageBlock], str | None]] = {}
"""`image_block_problem`'s memo, by block identity; an entry leaves with its block."""


def image_block_problem(block: ImageBlock) -> str | None:
    """`image_problem` or `image_url_problem` for a block, worked out once per block object.

    `repair_outbound` asks this for every image on every request; a block is immutable, so its
    verdict is kept (by identity, weakly) instead of decoding megabytes of base64 each time.
    """
    key = id(block)
    entry = _verdicts.get(key)
    if entry is not None and entry[0]() is block:
        return entry[1]
    if block.data is not None:
        verdict = image_problem(block.media_type, block.data)
    else:
        verdict = image_url_problem(block.url or "")
    _verdicts[key] = (weakref.ref(block, lambda _ref: _verdicts.pop(key, None)), verdict)
    return verdict


def _decode(data: str) -> bytes | None:
    try:
        return binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError):  # ValueError: a character that is not ASCII
        return None


def sniff_image(raw: bytes) -> tuple[str, int, int] | None:
    """(media type, width, height) read from an image's header; None when the bytes are no
    PNG, JPEG, GIF or WebP, or their header is cut short or says the image is empty."""
    found: tuple[str, int, int] | None = None
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(raw) >= 24 and raw[12:16] == b"IHDR":
            found = ("image/png", _be(raw, 16, 4), _be(raw, 20, 4))
    elif raw.startswith(b"\xff\xd8\xff"):
        found = _jpeg(raw)
    elif raw.startswith((b"GIF87a", b"GIF89a")):
        if len(raw) >= 13:
            found = ("image/gif", _le(raw, 6, 2), _le(raw, 8, 2))
    elif raw.startswith(b"RIFF") and raw[8:12] == b"WEBP":
        found = _webp(raw)
    if found is None or found[1] <= 0 or found[2] <= 0:
        return None
    return found


def _be(raw: bytes, at: int, size: int) -> int:
    return int.from_bytes(raw[at : at + size], "big")


def _le(raw: bytes, at: int, size: int) -> int:
    return int.from_bytes(raw[at : at + size], "little")


def _jpeg(raw: bytes) -> tuple[str, int, int] | None:
    """Walk the marker segments to the first start-of-frame, which holds the dimensions."""
    at, end = 2, len(raw)
    while at + 4 <= end:
        if raw[at] != 0xFF:
            return None
        marker = raw[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _JPEG_STANDALONE:
            at += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or scan data, before any frame header
            return None
        length = _be(raw, at + 2, 2)
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            if at + 9 > end:
                return None
            return ("image/jpeg", _be(raw, at + 7, 2), _be(raw, at + 5, 2))
        at += 2 + length
    return None


def _webp(raw: bytes) -> tuple[str, int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8 " and len(raw) >= 30 and raw[23:26] == b"\x9d\x01\x2a":
        return ("image/webp", _le(raw, 26, 2) & 0x3FFF, _le(raw, 28, 2) & 0x3FFF)
    if chunk == b"VP8L" and len(raw) >= 25 and raw[20] == 0x2F:
        bits = _le(raw, 21, 4)
        return ("image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(raw) >= 30:
        return ("image/webp", _le(raw, 24, 3) + 1, _le(raw, 27, 3) + 1)
    return None
