"""The ACP harness fails loudly: a message it cannot validate fails the test.

A fake agent — a few lines of Python spoken to over real stdio — writes what `defect` must
never write; the harness has to report it even when the test forgets to ask, and a schema
that cannot be loaded (or a check that breaks) must fail the test rather than let the agent's
messages pass unvalidated. The SDK logs and swallows whatever an observer raises, so these
are the tests that keep the harness honest.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.acp_harness import raw_session, spawn_defect
from tests.support.acp_schema import SCHEMA_DIR, SchemaUnavailable, SchemaViolation, acp_schema

pytestmark = pytest.mark.anyio

FAKE_AGENT = """
import json, sys

def send(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()

for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    if request["method"] == "initialize":
        send({"jsonrpc": "2.0", "id": request["id"],
              "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif request["method"] == "session/new":
        # Schema-invalid: an agent_message_chunk without its content block.
        send({"jsonrpc": "2.0", "method": "session/update",
              "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk"}}})
        send({"jsonrpc": "2.0", "id": request["id"], "result": {"sessionId": "s1"}})
"""


@pytest.fixture
def fake_agent(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_agent.py"
    script.write_text(FAKE_AGENT)
    return [sys.executable, str(script)]


@pytest.fixture
def fresh_schema(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """`acp_schema()` reloaded for this test, and reloaded again after it."""
    acp_schema.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    acp_schema.cache_clear()


async def test_an_invalid_update_fails_the_test_even_unasked(
    fake_agent: list[str], tmp_path: Path
) -> None:
    with pytest.raises(SchemaViolation) as raised:
        async with spawn_defect(command=fake_agent) as agent:
            await agent.initialize()
            await agent.new_session(tmp_path)
            # The observer ran before the response that follows the update was delivered.
            assert len(agent.wire.violations) == 1
            # The test body passes and never calls assert_schema_clean: the exit must fail.
    assert "session/update does not match SessionNotification" in str(raised.value)
    assert '"sessionUpdate": "agent_message_chunk"' in str(raised.value)


async def test_validated_at_exit_an_invalid_update_still_fails_the_test(
    fake_agent: list[str], tmp_path: Path
) -> None:
    """A benchmark's harness (`validate_at_exit`) defers the checks, never drops them."""
    with pytest.raises(SchemaViolation) as raised:
        async with spawn_defect(command=fake_agent, validate_at_exit=True) as agent:
            await agent.initialize()
            await agent.new_session(tmp_path)
            assert not agent.wire.violations  # recorded, not yet checked
            # The test body passes and never calls assert_schema_clean: the exit must fail.
    assert "session/update does not match SessionNotification" in str(raised.value)
    # The real agent passes the same deferred checks, each of its messages checked once.
    async with spawn_defect(validate_at_exit=True) as agent:
        await agent.initialize()
        await agent.new_session(tmp_path)
        agent.assert_schema_clean()
        assert not agent.wire._unchecked
    assert agent.wire.from_agent()
    assert not agent.wire.violations


async def test_assert_schema_clean_reports_the_violation(
    fake_agent: list[str], tmp_path: Path
) -> None:
    with pytest.raises(SchemaViolation, match="SessionNotification"):
        async with spawn_defect(command=fake_agent) as agent:
            await agent.initialize()
            await agent.new_session(tmp_path)
            try:
                agent.assert_schema_clean()
            finally:
                agent.wire.violations.clear()  # so only the explicit check above raises
    # A clean agent is the control: the same exchange with the real one passes.
    async with spawn_defect() as agent:
        await agent.initialize()
        await agent.new_session(tmp_path)
    assert agent.wire.from_agent()
    assert not agent.wire.violations


async def test_a_missing_schema_fails_before_the_agent_starts(
    fresh_schema: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fresh_schema.setenv("ACP_SCHEMA", str(tmp_path / "nowhere.json"))
    with pytest.raises(SchemaUnavailable, match=r"nowhere\.json"):
        async with spawn_defect():
            pytest.fail("the agent ran with no schema to validate it")
    with pytest.raises(SchemaUnavailable, match=r"nowhere\.json"):
        await raw_session([b"{}\n"])


async def test_an_unreadable_schema_fails(fresh_schema: pytest.MonkeyPatch, tmp_path: Path) -> None:
    broken = tmp_path / "schema.json"
    broken.write_text('{"$defs": ')
    fresh_schema.setenv("ACP_SCHEMA", str(broken))
    with pytest.raises(SchemaUnavailable, match="cannot load the ACP schema"):
        async with spawn_defect():
            pytest.fail("the agent ran with no schema to validate it")


async def test_a_check_that_breaks_inside_the_observer_fails_the_test(
    fresh_schema: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A schema without the definitions the check needs makes the check itself raise
    (`KeyError`) inside the SDK's observer; that must fail the test, not vanish in a log."""
    document = json.loads((SCHEMA_DIR / "schema.v1.json").read_text())
    del document["$defs"]["InitializeResponse"]
    partial = tmp_path / "schema.json"
    partial.write_text(json.dumps(document))
    fresh_schema.setenv("ACP_SCHEMA", str(partial))
    with pytest.raises(SchemaViolation, match="the schema check raised KeyError"):
        async with spawn_defect() as agent:
            await agent.initialize()


def test_the_clients_answer_to_an_elicitation_is_checked_too() -> None:
    schema = acp_schema()
    good = {"jsonrpc": "2.0", "id": 1, "result": {"action": "accept", "content": {"a": "b"}}}
    schema.check_client_response(good, "elicitation/create")
    bad = {"jsonrpc": "2.0", "id": 1, "result": {"action": "accept", "content": {"a": {"b": 1}}}}
    with pytest.raises(SchemaViolation, match="CreateElicitationResponse"):
        schema.check_client_response(bad, "elicitation/create")
    request = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "elicitation/create",
        "params": {"sessionId": "s", "mode": "form", "message": "m"},
    }
    with pytest.raises(SchemaViolation, match="elicitation/create"):
        schema.check_agent_message(request, None)  # a form without its schema
