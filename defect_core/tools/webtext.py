"""What a fetched body becomes for the model: Markdown, readable text, or the text as is.

Owns the content-type classification (HTML, other text, binary), the character decoding and
the HTML conversion used by `defect_core/tools/fetch.py`.

Invariants:
- Binary bodies are never turned into text: `classify` says `binary` for images, audio,
  video, fonts, archives, PDFs, and for an unlabelled or `application/octet-stream` body whose
  first bytes are not text, and the tool refuses those.
- HTML conversion drops what a reader never sees (scripts, styles, templates, SVG, frames)
  and makes links and images absolute against the page's URL, so the model can fetch them.
- Decoding never fails: the declared charset (or the HTML's own `<meta>`), else UTF-8, with
  undecodable bytes replaced.

Why markdownify (on BeautifulSoup with the standard library's HTML parser): a maintained,
MIT-licensed, pure-Python converter that keeps headings, links, lists, tables and code
blocks; it and its parser load only when a page is converted, never at start-up.
"""

from __future__ import annotations

import codecs
import re
from typing import TYPE_CHECKING, Literal
from urllib.parse import urljoin

if TYPE_CHECKING:
    from bs4 import BeautifulSoup

BodyKind = Literal["html", "text", "binary"]
Format = Literal["markdown", "text", "raw"]

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_APPLICATION_TYPES = frozenset(
    {
        "application/json", "application/xml", "application/javascript",
        "application/ecmascript", "application/x-javascript", "application/yaml",
        "application/x-yaml", "application/toml", "application/x-sh", "application/sql",
        "application/graphql", "application/x-ndjson", "application/jsonl",
        "application/x-www-form-urlencoded", "application/x-httpd-php",
    }
)  # fmt: skip
_UNLABELLED = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_INVISIBLE = ("script", "style", "noscript", "template", "svg", "iframe", "object", "embed")
SNIFF_BYTES = 1024
"""How much of an unlabelled body is looked at before deciding whether it is text."""


def media_type(content_type: str | None) -> str:
    """`text/html` of `text/html; charset=utf-8` (lower case; "" when absent)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def charset(content_type: str | None) -> str | None:
    """The declared charset, if Python knows it."""
    match = re.search(r";\s*charset\s*=\s*\"?([\w.:-]+)", content_type or "", re.IGNORECASE)
    if not match:
        return None
    try:
        return codecs.lookup(match.group(1)).name
    except LookupError:
        return None


def classify(content_type: str | None, head: bytes | None = None) -> BodyKind | None:
    """What the body is; None when the type says nothing and `head` (its first bytes) is
    still needed to decide."""
    kind = media_type(content_type)
    if kind in _HTML_TYPES:
        return "html"
    if kind.startswith("text/") or kind in _TEXT_APPLICATION_TYPES:
        return "text"
    if kind.endswith(("+json", "+xml", "+yaml")) and not kind.startswith(("image/", "audio/")):
        return "text"
    if kind not in _UNLABELLED:
        return "binary"
    if head is None:
        return None
    return _sniff(head)


def _sniff(head: bytes) -> BodyKind:
    sample = head[:SNIFF_BYTES]
    if b"\x00" in sample:
        return "binary"
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample) - 3:  # not merely a character cut by the sample's end
            return "binary"
        text = sample[: exc.start].decode("utf-8")
    lowered = text.lstrip().lower()
    if lowered.startswith(("<!doctype html", "<html")):
        return "html"
    return "text"


def decode(body: bytes, content_type: str | None) -> str:
    return body.decode(charset(content_type) or "utf-8", errors="replace")


def render(body: bytes, content_type: str | None, fmt: Format, base_url: str) -> str:
    """The body as the model reads it, in `fmt` (only HTML differs between formats)."""
    kind = classify(content_type, body)
    if kind != "html" or fmt == "raw":
        return decode(body, content_type)
    soup = _soup(body, content_type, base_url)
    if fmt == "text":
        return readable_text(soup)
    return to_markdown(soup)


def _soup(body: bytes, content_type: str | None, base_url: str) -> BeautifulSoup:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(body, "html.parser", from_encoding=charset(content_type))
    for tag in soup(_INVISIBLE):
        tag.decompose()
    for attribute, tags in (("href", ("a", "link")), ("src", ("img", "source"))):
        for tag in soup.find_all(tags):
            value = tag.get(attribute)
            if isinstance(value, str) and value.strip():
                try:
                    tag[attribute] = urljoin(base_url, value.strip())
                except ValueError:
                    continue
    return soup


def _title(soup: BeautifulSoup) -> str:
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    if soup.head is not None:
        soup.head.decompose()
    return title


def to_markdown(soup: BeautifulSoup) -> str:
    from markdownify import MarkdownConverter

    title = _title(soup)
    converter = MarkdownConverter(heading_style="ATX", bullets="-", code_language="")
    text = _tidy(converter.convert_soup(soup))
    if title and not text.lstrip().startswith("# "):
        text = f"# {title}\n\n{text}" if text else f"# {title}"
    return text


def readable_text(soup: BeautifulSoup) -> str:
    title = _title(soup)
    lines = (" ".join(line.split()) for line in soup.get_text("\n").splitlines())
    text = _tidy("\n".join(lines))
    return f"{title}\n\n{text}" if title and not text.startswith(title) else text


def _tidy(text: str) -> str:
    """At most one blank line in a row, no trailing spaces, no blank edges."""
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()
