"""`defect_core/media.py`: what the Messages API would refuse of an image or a document.

Each type the API takes (PNG, JPEG, GIF, WebP in its three forms) is read from its header at
the limit and one pixel past it; the bytes must be the declared type; base64 is strict; the
5 MB limit is on the base64 text; an image by URL must be http(s); a PDF starts `%PDF-`. The
memo behind `image_block_problem` answers for the block it saw, and lets go of it.
"""

from __future__ import annotations

import base64
import gc
from collections.abc import Callable

import pytest

from defect_core import media
from defect_core.media import (
    MAX_IMAGE_BASE64_BYTES,
    document_problem,
    image_block_problem,
    image_problem,
    image_url_problem,
    sniff_image,
)
from defect_core.model import ImageBlock
from tests.support.images import PNG_1X1, b64, gif, jpeg, png, webp_vp8, webp_vp8l, webp_vp8x

UNSUPPORTED = "is not supported (PNG, JPEG, GIF or WebP)"
BUILDERS = {
    "image/png": [png],
    "image/jpeg": [jpeg],
    "image/gif": [gif],
    "image/webp": [webp_vp8, webp_vp8l, webp_vp8x],
}


@pytest.mark.parametrize(
    ("media_type", "build"),
    [(t, b) for t, builders in BUILDERS.items() for b in builders],
)
def test_each_type_is_read_from_its_header_up_to_8000_pixels(
    media_type: str, build: Callable[[int, int], bytes]
) -> None:
    assert sniff_image(build(640, 480)) == (media_type, 640, 480)
    assert image_problem(media_type, b64(build(8000, 8000))) is None
    assert image_problem(media_type, b64(build(8001, 20))) == (
        "8001x20 pixels, over the 8000-pixel limit"
    )
    assert image_problem(media_type, b64(build(20, 8001))) == (
        "20x8001 pixels, over the 8000-pixel limit"
    )


def test_a_real_png_is_taken() -> None:
    assert image_problem("image/png", PNG_1X1) is None
    assert sniff_image(base64.b64decode(PNG_1X1)) == ("image/png", 1, 1)


def test_a_jpeg_frame_header_after_a_large_segment_is_found() -> None:
    assert sniff_image(jpeg(300, 200, app_segment=60_000)) == ("image/jpeg", 300, 200)


def test_the_declared_type_must_be_the_bytes_type() -> None:
    assert image_problem("image/png", b64(jpeg(10, 10))) == "not a valid PNG (the bytes are a JPEG)"
    assert image_problem("image/webp", b64(gif(10, 10))) == "not a valid WebP (the bytes are a GIF)"


@pytest.mark.parametrize(
    ("media_type", "data", "problem"),
    [
        ("image/png", "", "empty"),
        ("image/png", "!!notbase64", "not valid base64"),
        ("image/png", "iVBORw0KGgo", "not valid base64"),  # padding missing
        ("image/png", "iVBO\nRw0K", "not valid base64"),  # no whitespace
        ("image/png", "iVBORw0KGgo=", "not a valid PNG"),  # the signature, no IHDR
        ("image/png", b64(bytes(range(7, 71))), "not a valid PNG"),  # fixed: ids stay stable
        ("image/jpeg", b64(b"\xff\xd8\xff\xe0\x00\x10JFIF"), "not a valid JPEG"),  # cut short
        ("image/png", b64(png(0, 10)), "not a valid PNG"),
        ("image/gif", b64(b"GIF89a\x01"), "not a valid GIF"),
        ("image/bmp", b64(b"BM" + b"\0" * 40), f"type 'image/bmp' {UNSUPPORTED}"),
        (None, PNG_1X1, f"type None {UNSUPPORTED}"),
        ("image/pngé", "é", f"type 'image/pngé' {UNSUPPORTED}"),
        ("image/png", "é===", "not valid base64"),
    ],
)
def test_what_the_api_refuses_is_named(media_type: str | None, data: str, problem: str) -> None:
    assert image_problem(media_type, data) == problem


def test_the_size_limit_is_on_the_base64_text() -> None:
    header = b64(png(10, 10))
    at_limit = header + "A" * (MAX_IMAGE_BASE64_BYTES - len(header))
    assert len(at_limit) == MAX_IMAGE_BASE64_BYTES and len(at_limit) % 4 == 0
    assert image_problem("image/png", at_limit) is None
    over = at_limit + "AAAA"
    assert image_problem("image/png", over) == f"larger than 5 MB ({len(over)} bytes of base64)"


def test_images_by_url_must_be_http() -> None:
    assert image_url_problem("https://example.test/a.png") is None
    assert image_url_problem("HTTP://example.test/a.png") is None
    for url in ("file:///tmp/a.png", "data:image/png;base64,AAAA", "https://", "a.png", ""):
        assert image_url_problem(url) == "not an http(s) URL", url


def test_documents_need_valid_base64_and_a_pdf_its_magic() -> None:
    assert document_problem("application/pdf", b64(b"%PDF-1.7\n...")) is None
    assert document_problem("application/pdf", b64(b"<html>")) == "not a valid PDF"
    assert document_problem("application/zip", b64(b"PK\x03\x04")) is None
    assert document_problem(None, "not base64!") == "not valid base64"


def test_a_blocks_verdict_is_worked_out_once_and_released_with_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def counted(media_type: str | None, data: str) -> str | None:
        calls.append(data)
        return image_problem(media_type, data)

    monkeypatch.setattr(media, "image_problem", counted)
    good = ImageBlock(media_type="image/png", data=PNG_1X1)
    bad = ImageBlock(media_type="image/png", data=b64(jpeg(5, 5)))
    twin = ImageBlock(media_type="image/png", data=b64(jpeg(5, 5)))
    for _ in range(3):
        assert image_block_problem(good) is None
        assert image_block_problem(bad) == "not a valid PNG (the bytes are a JPEG)"
    assert calls == [PNG_1X1, bad.data], "each block is decoded once"
    assert image_block_problem(twin) == "not a valid PNG (the bytes are a JPEG)"
    assert len(calls) == 3, "an equal block is another object: judged on its own"
    assert image_block_problem(ImageBlock(url="file:///x.png")) == "not an http(s) URL"
    key = id(bad)
    assert media._verdicts[key][0]() is bad
    del bad
    gc.collect()
    assert key not in media._verdicts, "the memo does not keep a dead block's entry"
