"""ACP authentication through the real `defect acp`: `authMethods`, `authenticate`, `logout`.

A client that can run terminal auth is offered `defect login` (a `type: "terminal"` method,
valid against the vendored schema, as the ACP registry's check asks for it); a prompt without
any credentials is ACP's auth-required error (-32000) with what to do; after `defect login
--api-key-stdin` in another process, `authenticate` succeeds and the same running agent — with
no key in its environment — answers the prompt. The key never reaches the agent's log, the
session store or a recorded transcript.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from acp import RequestError
from acp import schema as s

from defect_fakeapi import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    DEFAULT_AWS_SECRET_KEY,
    FakeProvider,
    Reply,
)
from tests.support.acp_harness import agent_env, raw_session, run_defect, spawn_defect

pytestmark = pytest.mark.anyio

TERMINAL = s.ClientCapabilities(auth=s.AuthCapabilities(terminal=True))


def keyless_env(tmp_path: Path, fake: FakeProvider, **extra: str) -> dict[str, str]:
    """The agent on the Anthropic provider at the fake, with no key anywhere but the store."""
    env = agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        DEFECT_REASONING_EFFORT="off",
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        **extra,
    )
    assert "ANTHROPIC_API_KEY" not in env
    return env


def login(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_defect(["login", "--provider", "anthropic", "--api-key-stdin"], env, DEFAULT_API_KEY)


async def test_a_client_that_runs_terminal_auth_is_offered_defect_login(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    async with spawn_defect(env=keyless_env(tmp_path, fake_provider)) as agent:
        answer = await agent.conn.initialize(protocol_version=1, client_capabilities=TERMINAL)
        agent.assert_schema_clean()  # the whole answer, authMethods included
    [method] = answer.auth_methods
    assert isinstance(method, s.TerminalAuthMethod)
    assert (method.type, method.id, method.args) == ("terminal", "defect-login", ["login"])
    assert answer.agent_capabilities.auth.logout is not None
    async with spawn_defect(env=keyless_env(tmp_path, fake_provider)) as agent:
        plain = await agent.initialize()  # no auth.terminal: nothing it could run is offered
    assert plain.auth_methods == []


async def test_the_registry_checks_legacy_flag_gets_a_terminal_method(tmp_path: Path) -> None:
    """The ACP registry's CI sends `_meta: {"terminal-auth": true}` and wants a method whose
    `type` is `terminal` or `agent`."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientInfo": {"name": "ACP Registry Validator", "version": "1.0.0"},
            "clientCapabilities": {"terminal": True, "_meta": {"terminal-auth": True}},
        },
    }
    [answer], proc = await raw_session([json.dumps(request).encode() + b"\n"])
    proc.kill()
    await proc.wait()
    [method] = answer["result"]["authMethods"]
    assert method["type"] == "terminal" and method["args"] == ["login"]
    assert method["_meta"]["terminal-auth"]["args"] == ["-m", "defect_cli", "login"]
    assert answer["result"]["agentCapabilities"]["auth"] == {"logout": {}}


async def test_login_in_another_process_lets_the_running_agent_answer(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = keyless_env(tmp_path, fake_provider, DEFECT_LOG_LEVEL="debug")
    transcript = tmp_path / "recorded.jsonl"
    recorder = [sys.executable, "-m", "defect_transcript", "record", "--out", str(transcript)]
    fake_provider.enqueue(Reply.text("Logged in and answering."))
    async with spawn_defect(
        env=env, command=[*recorder, "--", sys.executable, "-m", "defect_cli", "acp"]
    ) as agent:
        await agent.conn.initialize(protocol_version=1, client_capabilities=TERMINAL)
        sid = await agent.new_session(tmp_path)
        with pytest.raises(RequestError) as no_key:
            await agent.prompt(sid, "hello")
        assert no_key.value.code == -32000
        assert "no Anthropic API key: set ANTHROPIC_API_KEY" in str(no_key.value)
        assert "run `defect login`" in str(no_key.value)
        with pytest.raises(RequestError) as not_yet:
            await agent.conn.authenticate(method_id="defect-login")
        assert not_yet.value.code == -32000 and "defect login" in str(not_yet.value)
        with pytest.raises(RequestError) as unknown:
            await agent.conn.authenticate(method_id="oauth")
        assert unknown.value.code == -32602

        logged_in = login(env)
        assert logged_in.returncode == 0, logged_in.stderr

        assert await agent.conn.authenticate(method_id="defect-login") is not None
        response = await agent.prompt(sid, "hello")
        assert response.stop_reason == "end_turn"
        assert agent.client.text(sid) == "Logged in and answering."
        assert fake_provider.requests[-1].rejected is False

        assert await agent.conn._conn.send_request("logout", {}) == {}
        assert not (tmp_path / "xdg" / "defect" / "credentials.toml").exists()
        with pytest.raises(RequestError) as logged_out:
            await agent.prompt(sid, "hello again")
        assert logged_out.value.code == -32000
        stderr = agent.stderr()

    # The key went to the fake API and nowhere else: not the log, the store, the transcript.
    assert "model_call_completed" in stderr  # the log is there and says things
    assert DEFAULT_API_KEY not in stderr
    stored = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite3" or "sqlite" in p.name or p.suffix == ".db" for p in stored)
    for path in stored:
        assert DEFAULT_API_KEY.encode() not in path.read_bytes(), path
    recorded = transcript.read_text()
    assert "Logged in and answering." in recorded
    assert DEFAULT_API_KEY not in recorded


@pytest.mark.parametrize("how", ["profile", "bearer token"])
async def test_bedrock_credentials_stored_by_login_reach_the_running_agent(
    tmp_path: Path, how: str
) -> None:
    """No AWS credentials anywhere (the default chain finds none): -32000; after `defect
    login --provider bedrock` in another process, the same agent calls Bedrock with them."""
    token = "bedrock-api-key-AbCdEf0123456789"
    (tmp_path / "aws-credentials").write_text(
        f"[fake]\naws_access_key_id = {DEFAULT_AWS_ACCESS_KEY_ID}\n"
        f"aws_secret_access_key = {DEFAULT_AWS_SECRET_KEY}\n"
    )
    with FakeProvider(bedrock_bearer_token=token) as fake:
        env = agent_env(
            DEFECT_PROVIDER="bedrock",
            ANTHROPIC_BEDROCK_BASE_URL=fake.url,
            AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"),
            AWS_EC2_METADATA_DISABLED="true",
            DEFECT_REASONING_EFFORT="off",
            XDG_CONFIG_HOME=str(tmp_path / "xdg"),
            DEFECT_STATE_DIR=str(tmp_path / "state"),
            HOME=str(tmp_path),
        )
        for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_REGION", "AWS_BEARER_TOKEN_BEDROCK"):
            env.pop(name, None)
        fake.enqueue(Reply.text("Hello from Bedrock."))
        async with spawn_defect(env=env) as agent:
            await agent.conn.initialize(protocol_version=1, client_capabilities=TERMINAL)
            sid = await agent.new_session(tmp_path)
            with pytest.raises(RequestError) as no_credentials:
                await agent.prompt(sid, "hello")
            assert no_credentials.value.code == -32000
            with pytest.raises(RequestError) as not_yet:
                await agent.conn.authenticate(method_id="defect-login")
            assert "defect login --provider bedrock" in str(not_yet.value)

            args = ["login", "--provider", "bedrock", "--region", "us-east-1"]
            args += ["--profile", "fake"] if how == "profile" else ["--bearer-token-stdin"]
            logged_in = run_defect(args, env, token if how == "bearer token" else "")
            assert logged_in.returncode == 0, logged_in.stderr

            assert await agent.conn.authenticate(method_id="defect-login") is not None
            assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
            assert agent.client.text(sid) == "Hello from Bedrock."

            logged_out_now = run_defect(["logout", "--provider", "bedrock"], env)
            assert logged_out_now.returncode == 0, logged_out_now.stderr
            with pytest.raises(RequestError) as logged_out:  # the client built before is gone
                await agent.prompt(sid, "hello again")
            assert logged_out.value.code == -32000
        [call] = fake.requests
        sent = call.headers["authorization"]
        assert sent == f"Bearer {token}" if how == "bearer token" else sent.startswith("AWS4-")
