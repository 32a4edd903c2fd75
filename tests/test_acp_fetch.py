"""The fetch tool through the real `defect acp` process, as an editor sees it.

In `ask` mode a fetch asks permission (kind `fetch`, the URL in the title) and "always allow"
is remembered for that host only; `read-only` refuses it without asking or connecting; and a
completed fetch hands the page to the model as Markdown (checked in the request the real
anthropic SDK sends to the strict fake API). The pages come from a local HTTP server opened
to the agent by `[fetch] allow` in the workspace's `.defect/config.toml`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import schema as s

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import RecordingClient, agent_env, script_env, spawn_defect
from tests.support.web_server import WebServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def web() -> Iterator[WebServer]:
    with WebServer() as server:
        yield server


@pytest.fixture
def other_web() -> Iterator[WebServer]:
    with WebServer() as server:
        yield server


def workspace(tmp_path: Path, *allow: str) -> Path:
    """A workspace whose own `[fetch] allow` lists `allow`, trusted by the user's file
    (`tmp_path/xdg`: `script_env(..., XDG_CONFIG_HOME=...)` points there)."""
    work = tmp_path / "work"
    (work / ".defect").mkdir(parents=True)
    (work / ".defect" / "config.toml").write_text(f"[fetch]\nallow = {json.dumps(list(allow))}\n")
    user = tmp_path / "xdg" / "defect" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'trusted_projects = ["{work}"]\n')
    return work


def fetch_call(url: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "fetch", "input": {"url": url}}]}


def tool_calls(client: RecordingClient, sid: str) -> dict[str, dict[str, Any]]:
    """Per tool call id: its kind, title and final status, from the updates the editor saw."""
    calls: dict[str, dict[str, Any]] = {}
    for session, update in client.updates:
        if session != sid or update.session_update not in ("tool_call", "tool_call_update"):
            continue
        call = calls.setdefault(update.tool_call_id, {})
        for key in ("kind", "title", "status"):
            value = getattr(update, key, None)
            if value is not None:
                call[key] = value
    return calls


async def test_fetch_asks_and_always_allow_is_remembered_per_host(
    tmp_path: Path, web: WebServer, other_web: WebServer
) -> None:
    work = workspace(tmp_path, web.netloc, other_web.netloc)
    replies = [
        fetch_call(web.url("/page.html")),
        fetch_call(web.url("/data.json")),  # same host: not asked again
        fetch_call(other_web.url("/page.html")),  # another host: asked, and rejected
        {"text": "done"},
    ]

    def answer(request: s.RequestPermissionRequest) -> str:
        return "allow_always" if web.netloc in (request.tool_call.title or "") else "reject_once"

    client = RecordingClient(permission=answer)
    async with spawn_defect(
        env=script_env(tmp_path, replies, XDG_CONFIG_HOME=str(tmp_path / "xdg")), client=client
    ) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "read the docs")).stop_reason == "end_turn"

        asked = [r.tool_call for r in client.permission_requests]
        assert [c.title for c in asked] == [
            f"Fetch {web.url('/page.html')}",
            f"Fetch {other_web.url('/page.html')}",
        ]
        assert all(c.kind == "fetch" for c in asked)
        assert "allow_always" in {o.kind for o in client.permission_requests[0].options}

        calls = list(tool_calls(client, sid).values())
        assert [c["kind"] for c in calls] == ["fetch"] * 3
        assert [c["status"] for c in calls] == ["completed", "completed", "failed"]
        assert calls[1]["title"] == f"Fetch {web.url('/data.json')}"
        assert web.paths == ["/page.html", "/data.json"]
        assert other_web.paths == [], "a rejected fetch never connects"
        assert client.text(sid).endswith("done")
        agent.assert_schema_clean()


async def test_read_only_mode_refuses_fetch_without_asking_or_connecting(
    tmp_path: Path, web: WebServer
) -> None:
    work = workspace(tmp_path, web.netloc)
    replies = [fetch_call(web.url("/page.html")), {"text": "could not fetch"}]
    client = RecordingClient()
    async with spawn_defect(
        env=script_env(tmp_path, replies, XDG_CONFIG_HOME=str(tmp_path / "xdg")), client=client
    ) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.conn.set_session_mode(session_id=sid, mode_id="read-only")
        assert (await agent.prompt(sid, "fetch it")).stop_reason == "end_turn"
        assert client.permission_requests == []
        calls = list(tool_calls(client, sid).values())
        assert [(c["kind"], c["status"]) for c in calls] == [("fetch", "failed")]
        assert web.paths == []
        assert client.text(sid).endswith("could not fetch")
        agent.assert_schema_clean()


async def test_a_completed_fetch_returns_markdown_to_the_model(
    tmp_path: Path, web: WebServer, fake_provider: FakeProvider
) -> None:
    work = workspace(tmp_path, web.netloc)
    fake_provider.enqueue(
        Reply.tool_use(None, "fetch", {"url": web.url("/page.html")}),
        Reply.text("Read it."),
    )
    env = agent_env(
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake_provider.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
    )
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "read the page")).stop_reason == "end_turn"
        assert len(agent.client.permission_requests) == 1  # ask mode; the harness allows once
        await anyio.to_thread.run_sync(fake_provider.wait_for_requests, 2)

        offered = {t["name"] for t in fake_provider.requests[0].body["tools"]}
        assert "fetch" in offered
        record = fake_provider.requests[1]
        assert not record.rejected, record.error_message
        results = [b for b in record.messages[-1]["content"] if b["type"] == "tool_result"]
        assert len(results) == 1 and not results[0].get("is_error")
        content = results[0]["content"]
        text = content if isinstance(content, str) else "".join(b["text"] for b in content)
        assert "# The Page" in text and "## Section" in text
        assert f"[a link]({web.url('/other')})" in text
        assert "<h2>" not in text and "stealCookies" not in text
        assert agent.client.text(sid).endswith("Read it.")
        agent.assert_schema_clean()
