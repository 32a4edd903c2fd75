"""Several providers at once, through the real `defect acp` process and two strict fake APIs.

A project configures `[providers.alpha]` (the Anthropic API, on one fake) and
`[providers.beta]` (Bedrock, on another fake with its own signing secret: a thinking signature
one mints, the other refuses). What an editor sees and what each service is sent: the model
picker lists both providers' models, grouped and labelled; a switch sends the next request to
the other provider with a history it accepts (the other one's thinking left out), and back; a
load restores the selection; the live model list arrives as a `config_option_update` after
`session/new`, which never waits for it; a provider that cannot list (unauthorised, offline)
keeps its configured list; a bad `[providers.NAME]` table fails the sessions of its project
with the file, the line and the key. Every message is checked against the ACP schema.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import RequestError

from defect_fakeapi import (
    DEFAULT_AWS_ACCESS_KEY_ID,
    DEFAULT_AWS_SECRET_KEY,
    FakeProvider,
    Reply,
    model_entry,
)
from tests.support.acp_harness import Agent, agent_env, spawn_defect

pytestmark = pytest.mark.anyio

ALPHA_KEY = "sk-ant-api03-alpha-test-key"
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.fixture
def alpha() -> Any:
    with FakeProvider(api_key=ALPHA_KEY) as fake:
        yield fake


@pytest.fixture
def beta() -> Any:
    with FakeProvider(aws_region="us-east-1") as fake:
        yield fake


def project(tmp_path: Path, config: str, *, own: bool = False) -> Path:
    """A workspace, with `config` as the user's own configuration (`env_for` points there) —
    or, `own`, as the workspace's `.defect/config.toml`, the user trusting the workspace."""
    work = tmp_path / "work"
    (work / ".defect").mkdir(parents=True, exist_ok=True)
    user = tmp_path / "xdg" / "defect" / "config.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    if own:
        (work / ".defect" / "config.toml").write_text(config)
        user.write_text(f'trusted_projects = ["{work}"]\n')
    else:
        user.write_text(config)
    (work / "notes.txt").write_text("remember the milk\n")
    return work


def two_providers(alpha: FakeProvider, beta: FakeProvider, *, extra: str = "") -> str:
    return (
        'provider = "alpha"\n\n'
        f'[providers.alpha]\nkind = "anthropic"\nbase_url = "{alpha.url}"\n'
        'api_key_env = "ALPHA_KEY"\nmodels = ["claude-sonnet-5-5", "claude-opus-5-5"]\n\n'
        f'[providers.beta]\nkind = "bedrock"\nbase_url = "{beta.url}"\nregion = "us-east-1"\n'
        f'models = ["{BEDROCK_MODEL}"]\n' + extra
    )


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return agent_env(
        ALPHA_KEY=ALPHA_KEY,
        AWS_ACCESS_KEY_ID=DEFAULT_AWS_ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY=DEFAULT_AWS_SECRET_KEY,
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        DEFECT_REASONING_EFFORT="medium",
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        **extra,
    )


def model_option(options: Any) -> Any:
    for option in options or []:
        option = getattr(option, "root", option)
        if option.id == "model":
            return option
    raise AssertionError("no model option")


def groups(option: Any) -> dict[str, list[tuple[str, str]]]:
    """heading → [(value, label)] of a grouped select."""
    return {
        g.group: [(o.value, o.name) for o in g.options]
        for g in (getattr(item, "root", item) for item in option.options)
    }


def latest_model_option(agent: Agent, sid: str) -> Any:
    updates = [
        u
        for s, u in agent.client.updates
        if s == sid and u.session_update == "config_option_update"
    ]
    return model_option(updates[-1].config_options) if updates else None


def logged(stderr: str) -> list[dict[str, Any]]:
    """The agent's structured log lines (JSON), skipping anything else on stderr."""
    entries = []
    for line in stderr.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


async def settled(*fakes: FakeProvider) -> None:
    for fake in fakes:
        await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))


def thinking_of(body: dict[str, Any]) -> list[str]:
    return [
        b["thinking"]
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "thinking"
    ]


def read_notes_with(thought: str, answer: str) -> list[Reply]:
    """A turn with a tool loop: think, read notes.txt, then answer."""
    return [
        Reply.thinking(thought, Reply.tool_use(None, "read_file", {"path": "notes.txt"})),
        Reply.text(answer),
    ]


async def test_the_picker_lists_both_providers_and_a_switch_goes_to_the_other_and_back(
    alpha: FakeProvider, beta: FakeProvider, tmp_path: Path
) -> None:
    work = project(tmp_path, two_providers(alpha, beta))
    alpha.enqueue(*read_notes_with("alpha plans", "alpha read it"))
    beta.enqueue(*read_notes_with("beta plans", "beta read it"))
    alpha.enqueue(*read_notes_with("alpha again", "alpha read it again"))
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        await agent.initialize()
        opened = await agent.conn.new_session(cwd=str(work), mcp_servers=[])
        sid = opened.session_id
        option = model_option(opened.config_options)
        assert option.current_value == "alpha/claude-sonnet-5-5"
        assert groups(option) == {
            "alpha": [
                ("alpha/claude-sonnet-5-5", "Claude Sonnet 5.5 (alpha)"),
                ("alpha/claude-opus-5-5", "Claude Opus 5.5 (alpha)"),
            ],
            "beta": [(f"beta/{BEDROCK_MODEL}", "Claude Sonnet 4.5 (US profile) (beta)")],
        }

        assert (await agent.prompt(sid, "read the notes")).stop_reason == "end_turn"
        switched = await agent.conn.set_config_option(
            session_id=sid, config_id="model", value=f"beta/{BEDROCK_MODEL}"
        )
        assert model_option(switched.config_options).current_value == f"beta/{BEDROCK_MODEL}"
        assert (await agent.prompt(sid, "now you")).stop_reason == "end_turn"
        await agent.conn.set_config_option(
            session_id=sid, config_id="model", value="alpha/claude-sonnet-5-5"
        )
        assert (await agent.prompt(sid, "and back")).stop_reason == "end_turn"
        assert agent.client.text(sid).endswith("alpha read it again")
        await settled(alpha, beta)

    for record in (*alpha.requests, *beta.requests):
        assert record.rejected is False, record.error_message
    assert [r.route for r in alpha.requests] == ["anthropic"] * 4
    assert [r.route for r in beta.requests] == ["bedrock"] * 2
    assert {r.model for r in beta.requests} == {BEDROCK_MODEL}
    # Bedrock never sees alpha's signatures; it does see its own within its tool loop.
    first_at_beta, second_at_beta = (r.body for r in beta.requests)
    assert thinking_of(first_at_beta) == []
    assert thinking_of(second_at_beta) == ["beta plans"]
    assert second_at_beta["thinking"]["type"] == "enabled"
    # Back at alpha: its own thinking of the first turn is sent again, beta's is not.
    back, loop = (r.body for r in alpha.requests[2:])
    assert thinking_of(back) == ["alpha plans"]
    assert thinking_of(loop) == ["alpha plans", "alpha again"]
    assert loop["thinking"]["type"] == "enabled"


async def test_a_load_restores_the_selection_and_uses_it(
    alpha: FakeProvider, beta: FakeProvider, tmp_path: Path
) -> None:
    work = project(tmp_path, two_providers(alpha, beta))
    beta.enqueue(Reply.text("on beta"), Reply.text("still on beta"))
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.conn.set_config_option(
            session_id=sid, config_id="model", value=f"beta/{BEDROCK_MODEL}"
        )
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"

    async with spawn_defect(env=env_for(tmp_path)) as again:
        await again.initialize()
        loaded = await again.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert model_option(loaded.config_options).current_value == f"beta/{BEDROCK_MODEL}"
        assert (await again.prompt(sid, "again")).stop_reason == "end_turn"
        await settled(beta)
    assert alpha.requests == []
    assert [r.rejected for r in beta.requests] == [False, False]


async def test_the_live_list_follows_session_new_which_never_waits_for_it(
    alpha: FakeProvider, beta: FakeProvider, tmp_path: Path
) -> None:
    work = project(tmp_path, two_providers(alpha, beta))
    alpha.models = [
        model_entry("claude-live-2", "Claude Live 2", max_input_tokens=500_000),
        model_entry("claude-live-1", "Claude Live 1"),
        model_entry("claude-gone", "Claude Gone", lifecycle="retired"),
    ]
    gate = threading.Event()
    alpha.models_gate = gate  # the listing is held until the test opens the gate
    try:
        async with spawn_defect(env=env_for(tmp_path)) as agent:
            await agent.initialize()
            with anyio.fail_after(60):  # a session/new that waited on the listing never ends
                opened = await agent.conn.new_session(cwd=str(work), mcp_servers=[])
            sid = opened.session_id
            configured = groups(model_option(opened.config_options))["alpha"]
            assert [value for value, _ in configured] == [
                "alpha/claude-sonnet-5-5",
                "alpha/claude-opus-5-5",
            ]
            await anyio.to_thread.run_sync(lambda: alpha.wait_for_listings(1, answered=False))
            assert not alpha.listings[0].done.is_set()  # answered while the listing is held
            assert latest_model_option(agent, sid) is None

            gate.set()
            await agent.client.wait_for(lambda: latest_model_option(agent, sid) is not None)
            live = groups(latest_model_option(agent, sid))
            assert live["alpha"] == [
                ("alpha/claude-sonnet-5-5", "claude-sonnet-5-5 (alpha)"),  # current, kept
                ("alpha/claude-live-2", "Claude Live 2 (alpha)"),
                ("alpha/claude-live-1", "Claude Live 1 (alpha)"),
            ]
            # Beta (Bedrock's listing is not served by the fake) keeps its configured model.
            assert [value for value, _ in live["beta"]] == [f"beta/{BEDROCK_MODEL}"]
            sent = alpha.listings[0].headers
            assert ALPHA_KEY in sent.get("x-api-key", "") + sent.get("authorization", "")

            alpha.enqueue(Reply.text("live model here"))
            await agent.conn.set_config_option(
                session_id=sid, config_id="model", value="alpha/claude-live-2"
            )
            assert (await agent.prompt(sid, "hi")).stop_reason == "end_turn"
            await settled(alpha)
            assert alpha.requests[-1].body["model"] == "claude-live-2"
    finally:
        gate.set()


async def test_unauthorised_or_offline_providers_keep_their_configured_lists(
    alpha: FakeProvider, beta: FakeProvider, tmp_path: Path
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        offline = f"http://127.0.0.1:{closed.getsockname()[1]}"  # nothing listens there
    beta_anthropic = FakeProvider().start()  # lists for real: the refresh ends with it
    try:
        beta_anthropic.models = [model_entry("claude-from-gamma", "From Gamma")]
        config = (
            'provider = "alpha"\n\n'
            f'[providers.alpha]\nkind = "anthropic"\nbase_url = "{alpha.url}"\n'
            'api_key_env = "WRONG_KEY"\nmodels = ["claude-alpha-configured"]\n\n'
            f'[providers.off]\nkind = "anthropic"\nbase_url = "{offline}"\n'
            'api_key_env = "ALPHA_KEY"\nmodels = ["claude-off-configured"]\n\n'
            f'[providers.gamma]\nkind = "anthropic"\nbase_url = "{beta_anthropic.url}"\n'
            'api_key_env = "GAMMA_KEY"\nmodels = ["claude-gamma-configured"]\n'
        )
        work = project(tmp_path, config)
        env = env_for(tmp_path, WRONG_KEY="sk-ant-wrong", GAMMA_KEY=beta_anthropic.api_key)
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(work)
            await agent.client.wait_for(lambda: latest_model_option(agent, sid) is not None)
            listed = {
                heading: [value for value, _ in choices]
                for heading, choices in groups(latest_model_option(agent, sid)).items()
            }
            assert listed == {
                "alpha": ["alpha/claude-alpha-configured"],
                "off": ["off/claude-off-configured"],
                "gamma": ["gamma/claude-from-gamma"],
            }
            assert [r.status for r in alpha.listings] == [401]
            unavailable = {
                entry["provider"]: entry["error"]
                for entry in logged(agent.stderr())
                if entry.get("event") == "model_list_unavailable"
            }
            assert set(unavailable) == {"alpha", "off"}
            assert "401" in unavailable["alpha"] and "could not reach" in unavailable["off"]
    finally:
        beta_anthropic.stop()


@pytest.mark.parametrize(
    ("table", "line", "words"),
    [
        ('[providers.x]\nkind = "bedrock"\napi_key_env = "K"\n', 3, "providers.x.api_key_env"),
        ('[providers.x]\nkind = "mistral"\n', 2, "providers.x.kind"),
        ('[providers.x]\nregion = "eu-west-1"\n', 1, "`kind` is required"),
        ('provider = "nowhere"\n', 1, "no provider is called 'nowhere'"),
    ],
)
async def test_a_bad_provider_table_fails_its_projects_sessions_naming_file_and_line(
    tmp_path: Path, table: str, line: int, words: str
) -> None:
    work = project(tmp_path, table, own=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        await agent.initialize()
        with pytest.raises(RequestError) as err:
            await agent.new_session(work)
        assert err.value.code == -32602
        message = str(err.value)
        assert f"{work / '.defect' / 'config.toml'}, line {line}" in message
        assert words in message
        assert await agent.new_session(elsewhere)  # every other session goes on


async def test_a_switch_the_configuration_cannot_serve_is_refused_and_changes_nothing(
    alpha: FakeProvider, beta: FakeProvider, tmp_path: Path
) -> None:
    extra = '\n[providers.beta.capabilities.web_search]\nmode = "delegate"\n'
    work = project(tmp_path, two_providers(alpha, beta, extra=extra))
    alpha.enqueue(Reply.text("still alpha"))
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        with pytest.raises(RequestError) as err:
            await agent.conn.set_config_option(
                session_id=sid, config_id="model", value=f"beta/{BEDROCK_MODEL}"
            )
        assert err.value.code == -32602
        assert "provider `beta`" in str(err.value)
        assert "[providers.beta.capabilities.web_search]" in str(err.value)
        assert (await agent.prompt(sid, "hi")).stop_reason == "end_turn"
        await settled(alpha)
    assert [r.rejected for r in alpha.requests] == [False]
    assert beta.requests == []
