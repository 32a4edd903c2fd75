"""Image bytes for tests: real headers of each type the Messages API takes, at any size.

Owns small builders (`png`, `jpeg`, `gif`, `webp_vp8`, `webp_vp8l`, `webp_vp8x`) that write a
file whose header says `width` x `height`, and `b64` to inline one. The pixel data is a token
(nobody here decodes pixels: defect and the fake API both judge an image by its header), so a
9000-pixel-wide image costs a few dozen bytes.

`PNG_1X1` is a complete, decodable 1x1 PNG, for tests that send an image the real API takes.
"""

from __future__ import annotations

import base64
import struct
import zlib

PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
    "rkJggg=="
)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00"))
        + _chunk(b"IEND", b"")
    )


def jpeg(width: int, height: int, *, app_segment: int = 16) -> bytes:
    """SOI, an APP0 segment of `app_segment` bytes, a baseline SOF0 frame header, EOI."""
    app = b"\xff\xe0" + struct.pack(">H", app_segment) + b"JFIF\x00".ljust(app_segment - 2, b"\0")
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app + sof + b"\xff\xd9"


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0) + b";"


def _riff(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def webp_vp8(width: int, height: int) -> bytes:
    frame = b"\x00\x00\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    return _riff(b"VP8 ", frame + b"\x00" * 8)


def webp_vp8l(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    return _riff(b"VP8L", b"\x2f" + struct.pack("<I", bits) + b"\x00" * 4)


def webp_vp8x(width: int, height: int) -> bytes:
    canvas = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return _riff(b"VP8X", b"\x00\x00\x00\x00" + canvas)
