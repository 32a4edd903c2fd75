"""What a session pays: the real `defect acp` process, the real SDK, and the strict fake API
simulating the prompt cache (`defect_fakeapi/cache.py`). Not timed: the figures are the
cache's token counts, which depend only on what defect sends.

- In a tool loop every request reads, from the cache, the whole of the request before it
  (the breakpoints on the last two user messages, `providers/anthropic/request.py`).
- A summary request (`/compact`) has the turn's prefix (system, tools, thinking) and reads
  the conversation it summarises from the cache instead of writing it again.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import pytest

from defect_core.compaction import CLEARED_PREFIX
from defect_core.summary_brief import SUMMARY_INSTRUCTIONS
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, PromptCache, Reply, RequestRecord
from tests.support.acp_harness import agent_env, spawn_defect

pytestmark = pytest.mark.anyio


def is_summary_request(body: dict[str, object]) -> bool:
    return SUMMARY_INSTRUCTIONS.splitlines()[0] in str(body["messages"][-1])  # type: ignore[index]


async def test_a_tool_loop_and_its_summary_read_the_prefix_from_the_cache(tmp_path: Path) -> None:
    for n in range(4):
        (tmp_path / f"module_{n}.py").write_text(
            "\n".join(f"def f_{n}_{i}(x: int) -> int:\n    return x + {i}\n" for i in range(60))
        )
    with FakeProvider(prompt_cache=PromptCache()) as fake:
        fake.enqueue(
            *(Reply.tool_use(None, "read_file", {"path": f"module_{n}.py"}) for n in range(4)),
            Reply.text("Four modules of small functions."),
            Reply.text("They add a constant."),
            Reply.text("## Goal\nUnderstand the modules.\n## Progress\nRead all four."),
        )
        env = agent_env(
            DEFECT_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_REASONING_EFFORT="off",
        )
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            assert (await agent.prompt(sid, "Read every module.")).stop_reason == "end_turn"
            assert (await agent.prompt(sid, "What do they do?")).stop_reason == "end_turn"
            assert (await agent.prompt(sid, "/compact")).stop_reason == "end_turn"
            await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))
    records = fake.requests
    assert [r.rejected for r in records] == [False] * 7
    usage = [r.cache_usage for r in records]
    assert all(u is not None for u in usage)
    loop = usage[:5]
    for before, now in itertools.pairwise(loop):
        assert before is not None and now is not None
        assert now.cache_read_input_tokens == before.total, "reads all of the previous request"
        assert now.cache_read_input_tokens > before.cache_read_input_tokens
        assert now.input_tokens == 0, "the whole request is written for the next one"
    summary, last_turn = records[6], usage[5]
    assert is_summary_request(summary.body) and not is_summary_request(records[5].body)
    assert summary.body["tools"] == records[4].body["tools"]
    assert summary.body["system"] == records[4].body["system"]
    assert summary.cache_usage is not None and last_turn is not None
    # The summary request is the conversation the last request sent (and cached), then the
    # last answer and the instruction: all but those two are read.
    assert summary.cache_usage.cache_read_input_tokens == last_turn.total
    assert summary.cache_usage.cache_read_input_tokens > 0.8 * summary.cache_usage.total


async def test_a_background_summary_reads_the_request_it_was_started_beside(
    tmp_path: Path,
) -> None:
    """A large result fills the window past the soft threshold: the summary starts in the
    background beside the turn's next request, and is sent once that request's reply has
    begun, so it reads the whole conversation that request wrote instead of writing it again
    (the API caches a prefix once a response to it has begun)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for n in range(8):
        (workspace / f"module_{n}.py").write_text(
            "\n".join(f"def f_{n}_{i}(x: int) -> int:\n    return x + {i}\n" for i in range(60))
        )
    (workspace / "big.log").write_text(
        "".join(f"{i:06d} INFO request handled in {i % 97} ms\n" for i in range(1_500))
    )
    config = tmp_path / "config"
    (config / "defect").mkdir(parents=True)
    (config / "defect" / "config.toml").write_text(
        '[models]\nanthropic = ["claude-sonnet-5-5"]\n'
        '[context_windows]\n"claude-sonnet-5-5" = 40000\n'
    )

    planned = [
        *(Reply.tool_use(None, "read_file", {"path": f"module_{n}.py"}) for n in range(8)),
        Reply.text("Eight modules."),
        Reply.tool_use(None, "read_file", {"path": "big.log"}),
    ]

    def answer(record: RequestRecord) -> Reply:
        if is_summary_request(record.body):
            return Reply.text("## Goal\nRead the modules and the log.")
        return planned.pop(0) if planned else Reply.text("Noted.")

    with FakeProvider(prompt_cache=PromptCache()) as fake:
        fake.enqueue(*([answer] * 20))
        env = agent_env(
            DEFECT_PROVIDER="anthropic",
            DEFECT_MODEL="claude-sonnet-5-5",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_REASONING_EFFORT="off",
            XDG_CONFIG_HOME=str(config),
        )
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(workspace)
            assert (await agent.prompt(sid, "Read every module.")).stop_reason == "end_turn"
            assert (await agent.prompt(sid, "What does the log say?")).stop_reason == "end_turn"
            assert (await agent.prompt(sid, "And now?")).stop_reason == "end_turn"
            await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))
    records = fake.requests
    assert not any(r.rejected for r in records)
    summaries = [i for i, r in enumerate(records) if is_summary_request(r.body)]
    assert len(summaries) == 1, "one background summary"
    (index,) = summaries
    turn = records[index - 1]  # the request after the log's result, sent before the summary
    assert not is_summary_request(turn.body)
    summary_usage, turn_usage = records[index].cache_usage, turn.cache_usage
    assert summary_usage is not None and turn_usage is not None
    assert summary_usage.cache_read_input_tokens == turn_usage.total, "read, not written again"
    assert summary_usage.cache_creation_input_tokens < 0.05 * summary_usage.total


async def test_the_request_after_a_micro_compaction_reads_the_prefix_before_it(
    tmp_path: Path,
) -> None:
    """Micro-compaction rewrites the history from the first result it clears: the requests
    before it kept a breakpoint just before that result (`ModelRequest.cache_anchor`), so the
    request after it reads the conversation up to there instead of writing it all again."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for n in range(6):
        (workspace / f"module_{n}.py").write_text(
            "\n".join(f"def f_{n}_{i}(x: int) -> int:\n    return x + {i}\n" for i in range(60))
        )
    config = tmp_path / "config"
    (config / "defect").mkdir(parents=True)
    (config / "defect" / "config.toml").write_text(
        '[models]\nanthropic = ["claude-sonnet-5-5"]\n'
        '[context_windows]\n"claude-sonnet-5-5" = 18000\n'
    )
    with FakeProvider(prompt_cache=PromptCache()) as fake:
        fake.enqueue(
            *(Reply.tool_use(None, "bash", {"command": f"echo {n}"}) for n in range(3)),
            Reply.text("Counted."),
            *(Reply.tool_use(None, "read_file", {"path": f"module_{n}.py"}) for n in range(6)),
            Reply.text("Six modules."),
            *(Reply.tool_use(None, "bash", {"command": f"echo {n}"}) for n in range(3, 11)),
            Reply.text("Echoed."),
            Reply.text("Nothing more."),
        )
        env = agent_env(
            DEFECT_PROVIDER="anthropic",
            DEFECT_MODEL="claude-sonnet-5-5",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_REASONING_EFFORT="off",
            XDG_CONFIG_HOME=str(config),
        )
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(workspace)
            await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
            for prompt in ("Echo three.", "Read the modules.", "Echo eight more.", "And?"):
                assert (await agent.prompt(sid, prompt)).stop_reason == "end_turn"
            await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))
    records = fake.requests
    assert not any(r.rejected for r in records)
    cleared = [i for i, r in enumerate(records) if CLEARED_PREFIX in str(r.body["messages"])]
    assert cleared and cleared[0] == len(records) - 1, "the last prompt's request clears"
    after = records[cleared[0]].cache_usage
    reading = records[4].cache_usage  # the first request of "Read the modules."
    assert after is not None and reading is not None
    assert "Read the modules." in str(records[4].body["messages"][-1])
    # The last turn's calls put the newest breakpoint more than 20 blocks past the modules:
    # only the breakpoint kept before the first of them finds everything up to that prompt.
    assert after.cache_read_input_tokens > reading.total
    assert after.cache_creation_input_tokens < after.total - reading.total
