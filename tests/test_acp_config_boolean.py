"""Boolean config options (ACP `type: "boolean"`, docs/acp-additions.md): defect has none,
so a client that supports them still gets only choices, and a boolean value sent for one of
defect's options is refused in one line naming the choices, the option left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp import RequestError
from acp import schema as s

from tests.support.acp_harness import script_env, spawn_defect

pytestmark = pytest.mark.anyio


async def test_a_boolean_for_a_choice_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async with spawn_defect(env=script_env(tmp_path)) as agent:
        options = s.SessionConfigOptionsCapabilities(boolean=s.BooleanConfigOptionCapabilities())
        await agent.conn.initialize(
            protocol_version=1,
            client_capabilities=s.ClientCapabilities(
                session=s.ClientSessionCapabilities(config_options=options)
            ),
            client_info=s.Implementation(name="test-client", version="0"),
        )
        opened = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        offered = list(opened.config_options or [])
        assert [(o.id, o.type) for o in offered] == [
            ("mode", "select"),
            ("model", "select"),
            ("reasoning_effort", "select"),
        ]
        before = {o.id: o.current_value for o in offered}
        with pytest.raises(RequestError) as refused:
            await agent.conn.set_config_option(
                session_id=opened.session_id, config_id="reasoning_effort", value=True
            )
        assert refused.value.code == -32602
        assert str(refused.value) == (
            "invalid value 'true' for reasoning_effort; choose one of: off, low, medium, high"
        )
        answer = await agent.conn.set_config_option(
            session_id=opened.session_id, config_id="mode", value=before["mode"]
        )
        after = {o.id: o.current_value for o in answer.config_options}
        assert after == before
        agent.assert_schema_clean()
