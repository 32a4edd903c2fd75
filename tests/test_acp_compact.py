"""`/compact` through the real `defect acp` process, on the offline model's script.

The command shows its work as a `think` card: on a conversation too short to summarise the
card says there is nothing to compact yet (a completed card, not a failure), and when the
summary request fails the card fails and names the provider's error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.acp_harness import Agent, script_env, spawn_defect

pytestmark = pytest.mark.anyio


def compact_card(agent: Agent, sid: str) -> Any:
    """The final update of the compaction's card."""
    [final] = [
        u
        for s_id, u in agent.client.updates
        if s_id == sid
        and u.session_update == "tool_call_update"
        and u.tool_call_id.startswith("compact_")
        and u.status in ("completed", "failed")
    ]
    return final


async def test_compact_on_a_short_conversation_says_there_is_nothing_to_compact(
    tmp_path: Path,
) -> None:
    async with spawn_defect(env=script_env(tmp_path, [{"text": "Hi."}])) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "/compact")).stop_reason == "end_turn"
        card = compact_card(agent, sid)
        assert card.status == "completed"
        [shown] = card.content
        assert shown.content.text == "Nothing to compact yet: too short to summarise."
        assert "failed" not in agent.client.text(sid)
        assert agent.client.text(sid).endswith(
            "Nothing to compact yet: the conversation is too short."
        )
        agent.assert_schema_clean()


async def test_a_failed_summary_fails_the_card_with_the_reason(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"text": f"answer {i} " + "w" * 4000} for i in range(6)]
    replies.append({"error": {"message": "the summariser is down", "kind": "api_error"}})
    env = script_env(tmp_path, replies, DEFECT_RETRIES="0")
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        for i in range(6):
            assert (await agent.prompt(sid, f"question {i}")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "/compact")).stop_reason == "end_turn"
        card = compact_card(agent, sid)
        assert card.status == "failed"
        [shown] = card.content
        assert shown.content.text == (
            "Compaction failed: the summary request failed: the summariser is down"
        )
        assert agent.client.text(sid).endswith(
            "Compaction failed: the summary request failed: the summariser is down"
        )
        agent.assert_schema_clean()
