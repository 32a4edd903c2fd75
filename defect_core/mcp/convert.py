"""An MCP tool result as defect's `ToolOutput`: what the model reads and what the user sees.

Owns `tool_output`, the one place that reads `mcp_types` content blocks (text, image, audio,
embedded resources, resource links, structured content).

Invariants:
- Nothing is silently dropped: text, images and embedded resources are kept; what the model
  cannot take (audio, binary resources, oversized or unsupported images, a content type newer
  than this code) becomes a one-line text note saying what it was and how big.
- Images go to the model only in the types and size the API accepts (`IMAGE_TYPES`,
  `MAX_IMAGE_BASE64_CHARS`); a rejected image would fail the whole request.
- Adjacent text parts are merged, so the turn runner's size cap sees the whole text; a result
  with no content still says so, in words the model can act on.
- Like every module of the package, it imports the `mcp` SDK (`mcp_types`) only inside the
  function that needs it (docs/architecture.md, rule 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from defect_core.events import ImageDisplay, TextDisplay, ToolDisplay
from defect_core.model import ImageBlock, JsonPart, ResultPart, TextBlock
from defect_core.tools.base import ToolOutput

if TYPE_CHECKING:
    import mcp_types

MAX_DISPLAY_CHARS = 100_000
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Image types the model accepts inline; other images become a text note."""
MAX_IMAGE_BASE64_CHARS = 5 * 1024 * 1024 * 4 // 3
"""The API's 5 MB image limit, as base64 characters."""


def tool_output(result: mcp_types.CallToolResult) -> ToolOutput:
    """An MCP tool result as defect's: text, images and embedded resources kept."""
    import mcp_types as t

    parts: list[ResultPart] = []
    display: list[ToolDisplay] = []
    for block in result.content:
        if isinstance(block, t.TextContent):
            parts.append(TextBlock(text=block.text))
        elif isinstance(block, t.ImageContent):
            parts.append(_image_or_note(block.data, block.mime_type, "image"))
            if isinstance(parts[-1], ImageBlock):
                display.append(ImageDisplay(block.mime_type, block.data))
        elif isinstance(block, t.AudioContent):
            size = len(block.data) * 3 // 4
            parts.append(TextBlock(text=f"[audio {block.mime_type}, {size} bytes, not shown]"))
        elif isinstance(block, t.EmbeddedResource):
            res = block.resource
            if isinstance(res, t.TextResourceContents):
                parts.append(TextBlock(text=f"[resource {res.uri}]\n{res.text}"))
            else:
                mime = res.mime_type or "application/octet-stream"
                if mime in IMAGE_TYPES:
                    parts.append(_image_or_note(res.blob, mime, f"resource {res.uri}"))
                    if isinstance(parts[-1], ImageBlock):
                        display.append(ImageDisplay(mime, res.blob))
                else:
                    size = len(res.blob) * 3 // 4
                    parts.append(
                        TextBlock(text=f"[binary resource {res.uri} ({mime}, {size} bytes)]")
                    )
        elif isinstance(block, t.ResourceLink):
            about = f": {block.description}" if block.description else ""
            parts.append(TextBlock(text=f"[resource link {block.uri} ({block.name}){about}]"))
        else:  # a content type newer than this code
            kind = getattr(block, "type", type(block).__name__)
            parts.append(TextBlock(text=f"[{kind} content, not shown]"))
    if not parts and result.structured_content is not None:
        parts.append(JsonPart(value=result.structured_content))
    merged = _merge_text(parts)
    if not merged:
        merged = [
            TextBlock(
                text="(the tool reported an error without a message)"
                if result.is_error
                else "(the tool returned no content)"
            )
        ]
    content: str | tuple[ResultPart, ...]
    if len(merged) == 1 and isinstance(merged[0], TextBlock):
        content = merged[0].text
    else:
        content = tuple(merged)
    shown: tuple[ToolDisplay, ...] = ()
    if display:
        text = "\n".join(p.text for p in merged if isinstance(p, TextBlock))
        if len(text) > MAX_DISPLAY_CHARS:
            text = text[:MAX_DISPLAY_CHARS] + "\n[… truncated]"
        shown = (*((TextDisplay(text),) if text else ()), *display)
    return ToolOutput(
        content,
        is_error=result.is_error,
        display=shown,
        raw_output=result.structured_content,
    )


def _image_or_note(data: str, mime: str, what: str) -> ResultPart:
    if mime in IMAGE_TYPES and 0 < len(data) <= MAX_IMAGE_BASE64_CHARS:
        return ImageBlock(media_type=mime, data=data)
    size = len(data) * 3 // 4
    return TextBlock(text=f"[{what}: {mime}, {size} bytes, not shown to the model]")


def _merge_text(parts: list[ResultPart]) -> list[ResultPart]:
    """Adjacent text parts as one, so the runner's size cap sees the whole text."""
    merged: list[ResultPart] = []
    for part in parts:
        if isinstance(part, TextBlock) and merged and isinstance(merged[-1], TextBlock):
            merged[-1] = TextBlock(text=f"{merged[-1].text}\n{part.text}")
        elif not (isinstance(part, TextBlock) and not part.text):
            merged.append(part)
    return merged
