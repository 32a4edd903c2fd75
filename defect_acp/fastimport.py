"""Start-up speed: import the ACP SDK in about half the time.

Owns `prepare_pydantic()`, which runs before the first `import acp`.

Why: an editor waits on `initialize` and `session/new`, and `import acp` is most of that
wait (~0.6 s here): `acp.schema` defines ~270 pydantic models whose base config asks
pydantic to read every field's docstring from the source file (`use_attribute_docstrings`;
below Python 3.13 that re-parses each class with `ast`), and pydantic builds every
validator eagerly. Field docstrings only feed JSON-schema descriptions, which defect never
generates, and validators can be built on first use (`defer_build`), which spreads a few
milliseconds over the first requests instead of paying for all 270 models up front.

Invariant: both changes are optional optimisations. If pydantic's internals move (a newer
release), `prepare_pydantic` changes nothing and says so in its return value; a test pins
that it still applies to the pydantic this project installs, and the integration tests
prove the SDK's models still validate and serialise the same way.
"""

from __future__ import annotations


def prepare_pydantic() -> list[str]:
    """Apply the start-up optimisations; returns the names of those that applied."""
    applied: list[str] = []
    try:
        from pydantic._internal import _config, _fields
    except ImportError:
        return applied
    if callable(getattr(_fields, "extract_docstrings_from_cls", None)):

        def _no_docstrings(cls: type, use_inspect: bool = False) -> dict[str, str]:
            return {}

        _fields.extract_docstrings_from_cls = _no_docstrings
        applied.append("skip_attribute_docstrings")
    defaults = getattr(_config, "config_defaults", None)
    if isinstance(defaults, dict) and "defer_build" in defaults:
        defaults["defer_build"] = True
        applied.append("defer_build")
    return applied


def warm_turn_path() -> None:
    """Build, ahead of the first prompt, the validators a turn needs (deferred above).

    Called once, by the first `session/new`: a few tens of milliseconds on a wait of a few
    hundred, so that no prompt (even one sent at once) pays for the builds.
    """
    from acp import schema as s
    from acp.helpers import update_agent_message_text, update_agent_thought_text

    from defect_core.model import Message, TextBlock, message_from_json, message_to_json

    s.PromptRequest.model_validate({"sessionId": "w", "prompt": [{"type": "text", "text": "w"}]})
    s.CancelNotification.model_validate({"sessionId": "w"})
    dump = {"mode": "json", "by_alias": True, "exclude_none": True, "exclude_unset": True}
    for update in (
        update_agent_message_text("w"),
        update_agent_thought_text("w"),
        s.ToolCallStart(session_update="tool_call", tool_call_id="w", title="w", kind="read"),
        s.ToolCallProgress(session_update="tool_call_update", tool_call_id="w", status="completed"),
        s.UsageUpdate(session_update="usage_update", used=1, size=2),
        s.SessionInfoUpdate(session_update="session_info_update", title="w"),
    ):
        s.SessionNotification(session_id="w", update=update).model_dump(**dump)  # type: ignore[arg-type]
    s.PromptResponse(stop_reason="end_turn").model_dump(**dump)  # type: ignore[arg-type]
    message_from_json(message_to_json(Message(role="user", content=(TextBlock(text="w"),))))
