"""Whose signature a thinking block carries, and the outbound copy that keeps only the model's own.

Owns `stamp_origin` (a reply's signed thinking, marked with the `ModelSelection.value` that
produced it, before it becomes history) and `own_thinking_only` (an outbound copy of the
history without the thinking another provider or model signed).

Why: a session may switch model and provider between turns (the model picker). A thinking
signature (and a redacted block's data) is only valid at the service that minted it: sent to
another one, the whole request is refused ("Invalid `signature` in `thinking` block"), and
every later request with it. The API lets earlier turns' thinking be left out, so the copy
sent to the provider drops what it cannot verify; the turn's own rule for the tool loop in
progress still holds, because the request then goes without thinking
(`providers/anthropic/request.py`: a loop opened without a thinking block is sent with
thinking off).

Invariants:
- The stored history keeps every block as it was (with its origin): only the outbound copy
  is filtered, like every repair (`integrity.py`), and it runs before `repair_outbound`,
  which then removes what the filter left empty.
- Unstamped blocks (histories written before sessions could switch) are taken as the work of
  the provider the session was using when it was loaded (`unstamped_provider`), and kept
  only while that provider is asked.
- No copy when nothing is dropped: the input list itself is returned.
- Each request walks only the messages no earlier request of the history went through
  (`prefix_memo.py`: a rewound or compacted history is walked afresh); the copy of the rest is
  remembered, and the caller always gets a list of its own.
"""

from __future__ import annotations

from defect_core.model import (
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchResultBlock,
    replaced,
)
from defect_core.prefix_memo import PrefixMemo
from defect_core.selection import ModelSelection

__all__ = ["own_thinking_only", "stamp_origin"]


def stamp_origin(message: Message, selection: ModelSelection) -> Message:
    """`message` with its unstamped thinking blocks marked as `selection`'s."""
    origin = selection.value
    if not any(
        isinstance(b, ThinkingBlock | RedactedThinkingBlock) and b.origin is None
        for b in message.content
    ):
        return message
    content = tuple(
        replaced(b, origin=origin)
        if isinstance(b, ThinkingBlock | RedactedThinkingBlock) and b.origin is None
        else b
        for b in message.content
    )
    return replaced(message, content=content)


def own_thinking_only(
    messages: list[Message], selection: ModelSelection, unstamped_provider: str | None
) -> list[Message]:
    """`messages` without the thinking `selection` did not sign (see the module docstring)."""
    origin = selection.value
    # Unstamped blocks are taken as the work of `unstamped_provider` (none: of whoever asks).
    unstamped_ours = unstamped_provider is None or unstamped_provider == selection.provider

    def foreign(block: object) -> bool:
        if not isinstance(block, _THINKING_KINDS):
            return False
        stamp = block.origin
        return not unstamped_ours if stamp is None else stamp != origin

    key = (origin, unstamped_provider)
    proof = _copies.check_out(messages, key)
    start = len(proof.messages)
    out = proof.state  # the copy of the messages gone through, None while it is themselves
    # A session's first request walks every block of every assistant message: a block of a
    # kind that never carries a signature is passed over with one set look-up.
    never_thinking = _NEVER_THINKING
    for index in range(start, len(messages)):
        message = messages[index]
        if message.role == "assistant":
            for block in message.content:
                if type(block) in never_thinking or not foreign(block):
                    continue
                if out is None:
                    out = messages[:index]
                kept = tuple(b for b in message.content if not foreign(b))
                message = replaced(message, content=kept)
                break
        if out is not None:
            out.append(message)
    proof.messages += messages[start:]
    proof.state = out
    copy = messages if out is None else list(out)  # the caller's own list, never the memo's
    _copies.check_in(proof, key)
    return copy


_THINKING_KINDS = (ThinkingBlock, RedactedThinkingBlock)

_NEVER_THINKING = frozenset(
    {
        TextBlock,
        ImageBlock,
        ToolUseBlock,
        ToolResultBlock,
        ServerToolUseBlock,
        WebSearchResultBlock,
    }
)
"""The exact block kinds that carry no signature of a model (an instance of a subclass of a
thinking kind is not among them)."""

_copies: PrefixMemo[list[Message] | None] = PrefixMemo(lambda: None)
"""Per history and (selection, unstamped provider): the copy made of the messages gone through
already. A request copies again only its new messages, and a message filtered once is sent as
the same object on every request (so the repair's memo recognises it, and the provider's
prompt cache sees the same bytes)."""
