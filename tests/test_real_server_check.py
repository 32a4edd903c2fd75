"""The real-server check's own logic (`scripts/real_server_check.py`, `real_server_wire.py`),
proven against the fake Chat Completions API instead of a real server.

What is proven: the probes' shapes compare equal for two servers a client cannot tell apart
and list exactly the facts where the fake playing llama.cpp (`Reply.chat_dialect`) differs
from the fake playing OpenAI; and the whole check, pointed at a server by
`DEFECT_REAL_SERVER_URL`, drives `defect exec` through it (a streamed answer with usage, a
turn cancelled by SIGINT mid-stream) and reports no difference from the fake playing the
same dialect.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from defect_fakeapi import FakeProvider, Reply, TextBlock, ToolUseBlock
from scripts.real_server_wire import differences, model_facts, run_probes
from tests.support.acp_harness import agent_env

REPO = Path(__file__).resolve().parent.parent

KEY = "sk-real-server-test"
STORY = " ".join(f"Line {n} of a slow story." for n in range(40))


def probes(dialect: str) -> dict[str, dict[str, object]]:
    hello = Reply.of([TextBlock("Hello there.")])
    call = Reply.of([ToolUseBlock("call_w1", "get_weather", {"city": "Paris"})])
    with FakeProvider(api_key=KEY) as fake:
        for reply in (hello, hello, call):
            fake.enqueue(dataclasses.replace(reply, chat_dialect=dialect))
        return run_probes(f"{fake.url}/v1", "tiny", KEY, timeout=30)


def test_the_shapes_of_the_two_dialects_differ_only_where_llama_cpp_does() -> None:
    openai, llama = probes("openai"), probes("llama.cpp")
    assert differences(openai, probes("openai")) == []
    found = differences(openai, llama)
    facts = {line.split(":")[0] for line in found}
    assert facts == {
        f"{probe}.{fact}"
        for probe in ("stream", "tool_call")
        for fact in (
            "choice_keys",
            "chunk_keys",
            "first_delta",
            "usage_chunk_keys",
            "usage_keys",
            "usage_null_on_choice_chunks",
        )
    } | {"plain.body_keys", "plain.choice_keys", "plain.message_keys", "plain.usage_keys"}
    assert "orphan_tool.status" not in facts  # the fake refuses it in both dialects
    assert 'tool_call.finish_reasons: ["tool_calls"]' in model_facts(llama)


def test_an_answer_opening_outside_ascii_is_not_a_first_chunk_difference() -> None:
    openai = probes("openai")
    emoji = json.loads(json.dumps(openai))
    chunks = emoji["stream"]["chunks"]
    chunks[1]["choices"][0]["delta"] = {"content": "🌌"}
    del chunks[0]  # as llama.cpp sends it: no role chunk
    assert differences(openai, emoji) == []
    assert "stream.opens_outside_ascii: true" in model_facts(emoji)
    del chunks[0]  # the answer now opens in ASCII, and still has no role chunk
    assert {d.split(":")[0] for d in differences(openai, emoji)} == {
        "stream.first_delta",
        "stream.first_delta_names_role",
    }


@pytest.fixture
def slow_llama() -> Iterator[FakeProvider]:
    story = dataclasses.replace(
        Reply.text(STORY), chat_dialect="llama.cpp", chunk_size=8, chunk_delay=0.05
    )
    with FakeProvider(api_key=KEY, default_reply=story) as fake:
        yield fake


def test_the_check_drives_defect_exec_through_a_named_server(
    tmp_path: Path, slow_llama: FakeProvider
) -> None:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "real_server_check.py"), "--report", str(report)],
        env=agent_env(
            DEFECT_REAL_SERVER_URL=f"{slow_llama.url}/v1",
            DEFECT_REAL_SERVER_MODEL="tiny",
            DEFECT_REAL_SERVER_KEY=KEY,
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    seen = json.loads(report.read_text())
    assert seen["stream"]["stop_reason"] == "end_turn"
    assert seen["stream"]["text_events"] > 1
    assert seen["stream"]["usage"]["output_tokens"] > 0
    assert seen["cancel"]["interrupted_mid_stream"] is True
    assert (seen["cancel"]["exit_code"], seen["cancel"]["stop_reason"]) == (130, "cancelled")
    assert seen["differences_from_fake_llama.cpp"] == []
    assert any("usage_null_on_choice_chunks" in d for d in seen["differences_from_fake_openai"])
    bodies = [r.body for r in slow_llama.requests if r.path.endswith("/chat/completions")]
    assert any(b.get("tools") for b in bodies)  # defect exec offered its tools
