"""Start-up speed: build, ahead of the first prompt, the validators a turn needs.

Owns `warm_turn_path()`, which the first `session/new` calls.

Why: an editor waits on `initialize` and `session/new`, and `import acp` is most of that wait.
`defect_acp.sdk_compat.prepare_pydantic` (run before the first `import acp`) halves it, among
other things by letting pydantic build each model's validator on first use (`defer_build`).
Left alone, the first prompt would pay for the builds its turn needs; this pays for them during
`session/new` instead, a few tens of milliseconds on a wait of a few hundred.

Invariant: only an optimisation. Every model still validates and serialises the same way,
built early or late; the integration tests prove it.
"""

from __future__ import annotations


def warm_turn_path() -> None:
    """Build, ahead of the first prompt, the validators a turn needs (deferred above).

    Called once, by the first `session/new`: a few tens of milliseconds on a wait of a few
    hundred, so that no prompt (even one sent at once) pays for the builds.
    """
    from acp import schema as s

    from defect_acp.projection import message_text, thought_text
    from defect_core.model import Message, TextBlock, message_from_json, message_to_json

    s.PromptRequest.model_validate({"sessionId": "w", "prompt": [{"type": "text", "text": "w"}]})
    s.CancelNotification.model_validate({"sessionId": "w"})
    dump = {"mode": "json", "by_alias": True, "exclude_none": True, "exclude_unset": True}
    for update in (
        message_text("w"),
        thought_text("w"),
        s.ToolCallStart(session_update="tool_call", tool_call_id="w", title="w", kind="read"),
        s.ToolCallProgress(session_update="tool_call_update", tool_call_id="w", status="completed"),
        s.UsageUpdate(session_update="usage_update", used=1, size=2),
        s.SessionInfoUpdate(session_update="session_info_update", title="w"),
    ):
        s.SessionNotification(session_id="w", update=update).model_dump(**dump)  # type: ignore[arg-type]
    s.PromptResponse(stop_reason="end_turn").model_dump(**dump)  # type: ignore[arg-type]
    message_from_json(message_to_json(Message(role="user", content=(TextBlock(text="w"),))))
