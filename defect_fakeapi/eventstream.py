"""AWS binary event-stream framing (`application/vnd.amazon.eventstream`) for the fake Bedrock.

Owns: encoding one event-stream message (prelude, headers, payload, CRCs) and the two kinds of
frames Bedrock's `InvokeModelWithResponseStream` sends — `chunk` events wrapping an Anthropic
stream event, and `exception` frames for in-stream errors — plus a small decoder for tests.

Invariant: every frame this module writes is byte-compatible with botocore's
`EventStreamBuffer` (the parser the `anthropic` SDK uses for Bedrock): total length and header
length in the prelude, a CRC32 of the 8-byte prelude, string headers (type 7), and a CRC32 of
the whole message before the trailing checksum.

Why: the SDK decodes Bedrock streams with botocore, so a fake that is off by a single byte is
not a fake of Bedrock at all; keeping the framing here, separate from the HTTP server, lets the
tests check it against botocore directly.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_STRING_HEADER_TYPE = 7
_PRELUDE_LENGTH = 12  # total length (4) + headers length (4) + prelude CRC (4)
_TRAILER_LENGTH = 4  # message CRC


def _crc32(data: bytes, start: int = 0) -> int:
    return zlib.crc32(data, start) & 0xFFFFFFFF


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """Encode string-valued event-stream headers in insertion order."""
    out = bytearray()
    for name, value in headers.items():
        name_bytes = name.encode("utf-8")
        value_bytes = value.encode("utf-8")
        if len(name_bytes) > 255:
            raise ValueError(f"header name too long: {name!r}")
        if len(value_bytes) > 0xFFFF:
            raise ValueError(f"header value too long for {name!r}")
        out += struct.pack(">B", len(name_bytes)) + name_bytes
        out += struct.pack(">BH", _STRING_HEADER_TYPE, len(value_bytes)) + value_bytes
    return bytes(out)


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One complete event-stream message: prelude, prelude CRC, headers, payload, message CRC."""
    header_bytes = encode_headers(headers)
    total_length = _PRELUDE_LENGTH + len(header_bytes) + len(payload) + _TRAILER_LENGTH
    prelude = struct.pack(">II", total_length, len(header_bytes))
    prelude_crc = struct.pack(">I", _crc32(prelude))
    body = prelude + prelude_crc + header_bytes + payload
    return body + struct.pack(">I", _crc32(body))


def chunk_frame(event: Mapping[str, Any]) -> bytes:
    """A Bedrock `chunk` event carrying one Anthropic stream event as base64 JSON bytes."""
    raw = json.dumps(event, separators=(",", ":")).encode("utf-8")
    payload = json.dumps({"bytes": base64.b64encode(raw).decode("ascii")}).encode("utf-8")
    headers = {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return encode_message(headers, payload)


def exception_frame(exception_type: str, message: str) -> bytes:
    """A Bedrock in-stream exception (for example `throttlingException`) with `{"message": …}`."""
    payload = json.dumps({"message": message}).encode("utf-8")
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, payload)


@dataclass(frozen=True)
class Frame:
    """A decoded event-stream message."""

    headers: dict[str, str]
    payload: bytes

    def chunk_event(self) -> dict[str, Any]:
        """The Anthropic event inside a `chunk` frame."""
        outer = json.loads(self.payload)
        decoded: dict[str, Any] = json.loads(base64.b64decode(outer["bytes"]))
        return decoded


def decode_frames(data: bytes) -> list[Frame]:
    """Decode a complete buffer of frames, checking both CRCs; raises ValueError when corrupt."""
    frames: list[Frame] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < _PRELUDE_LENGTH:
            raise ValueError("truncated prelude")
        total_length, headers_length = struct.unpack_from(">II", data, offset)
        (prelude_crc,) = struct.unpack_from(">I", data, offset + 8)
        if _crc32(data[offset : offset + 8]) != prelude_crc:
            raise ValueError("prelude CRC mismatch")
        end = offset + total_length
        if end > len(data):
            raise ValueError("truncated message")
        (message_crc,) = struct.unpack_from(">I", data, end - _TRAILER_LENGTH)
        if _crc32(data[offset : end - _TRAILER_LENGTH]) != message_crc:
            raise ValueError("message CRC mismatch")
        cursor = offset + _PRELUDE_LENGTH
        headers_end = cursor + headers_length
        headers: dict[str, str] = {}
        while cursor < headers_end:
            name_length = data[cursor]
            cursor += 1
            name = data[cursor : cursor + name_length].decode("utf-8")
            cursor += name_length
            value_type, value_length = struct.unpack_from(">BH", data, cursor)
            cursor += 3
            if value_type != _STRING_HEADER_TYPE:
                raise ValueError(f"unsupported header type {value_type}")
            headers[name] = data[cursor : cursor + value_length].decode("utf-8")
            cursor += value_length
        frames.append(Frame(headers, bytes(data[headers_end : end - _TRAILER_LENGTH])))
        offset = end
    return frames
