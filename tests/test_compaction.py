"""Long sessions: micro, background and full compaction, the summary boundary, `/compact`,
`/context`, usage updates, oversized results, and load after compaction.

The long-session tests run the real turn runner against the strict fake provider through the
real Anthropic SDK, with a small configured window, and check every request it saw.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from defect_core.compaction import (
    CLEARED_PREFIX,
    SUMMARY_MAX_TOKENS,
    Compactor,
    Thresholds,
    choose_boundary,
    is_summary,
    micro_compact,
    micro_gain,
    summarise,
    summary_message,
    summary_request,
)
from defect_core.config import Settings
from defect_core.events import AgentEvent, ToolCallStarted, ToolCallUpdated, UsageReported
from defect_core.history import VecHistory
from defect_core.integrity import repair_outbound
from defect_core.model import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    assistant,
    user,
)
from defect_core.providers.anthropic.request import encode_request
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.providers.base import ModelRequest, StreamChunk
from defect_core.providers.scripted import ScriptedProvider
from defect_core.session import Backends, DefaultAgentCore, DefaultSession
from defect_core.store import AsyncStore, SqliteStore
from defect_core.summary_brief import SUMMARY_INSTRUCTIONS
from defect_core.tools.base import Safety, ToolCallView, ToolOutput
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, estimate_tokens, validate_request

pytestmark = pytest.mark.anyio


def tool_round(i: int, size: int) -> list[Message]:
    """One user turn: a prompt, a tool call, its (large) result, an answer."""
    return [
        user(f"prompt {i}"),
        assistant(f"calling {i}", ToolUseBlock(id=f"toolu_{i}", name="big", input={"n": i})),
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id=f"toolu_{i}", content="r" * size, is_error=i == 1),
            ),
        ),
        assistant(f"answer {i}"),
    ]


# --- micro-compaction ---------------------------------------------------------------------


def test_micro_compaction_clears_old_large_results_and_keeps_ids() -> None:
    messages = [m for i in range(5) for m in tool_round(i, 5_000)]
    out = micro_compact(messages, Thresholds(micro_keep_turns=2))
    assert out is not None and len(out) == len(messages)
    results = [b for m in out for b in m.content if isinstance(b, ToolResultBlock)]
    cleared = [
        r for r in results if isinstance(r.content, str) and r.content.startswith(CLEARED_PREFIX)
    ]
    assert [r.tool_use_id for r in cleared] == ["toolu_0", "toolu_1", "toolu_2"]
    assert [r.tool_use_id for r in results] == [f"toolu_{i}" for i in range(5)]
    assert results[1].is_error, "error flags are kept"
    assert "big" in str(cleared[0].content) and "again" in str(cleared[0].content)
    assert micro_compact(out, Thresholds(micro_keep_turns=2)) is None, "idempotent"
    assert micro_compact(messages[:8], Thresholds(micro_keep_turns=2)) is None


def test_a_steer_inside_a_turn_does_not_count_as_a_turn_of_its_own() -> None:
    """Steers and notes join the turn they came in: the last `micro_keep_turns` prompts'
    results stay whole however often the person steered."""
    messages = [m for i in range(4) for m in tool_round(i, 5_000)]
    steered = [*messages[:-1], Message(role="user", content=(TextBlock(text="use tabs"),),
                                       inside_turn="steer"), messages[-1]]  # fmt: skip
    for history in (messages, steered):
        out = micro_compact(history, Thresholds(micro_keep_turns=2))
        assert out is not None
        cleared = [
            b.tool_use_id
            for m in out
            for b in m.content
            if isinstance(b, ToolResultBlock) and str(b.content).startswith(CLEARED_PREFIX)
        ]
        assert cleared == ["toolu_0", "toolu_1"], history is steered


def test_micro_compaction_leaves_small_results_alone() -> None:
    messages = [m for i in range(5) for m in tool_round(i, 100)]
    assert micro_compact(messages, Thresholds(micro_keep_turns=1)) is None


# --- boundaries and summaries ---------------------------------------------------------------


def test_boundary_never_splits_a_tool_use_from_its_result() -> None:
    messages = [m for i in range(6) for m in tool_round(i, 400)]
    for keep in (0, 50, 200, 400, 800, 5_000):
        boundary = choose_boundary(messages, keep)
        if boundary:
            first_kept = messages[boundary]
            assert first_kept.role == "user" and not first_kept.tool_results()
            assert boundary >= 2


def test_boundary_keeps_about_the_budget() -> None:
    messages = [m for i in range(10) for m in tool_round(i, 4_000)]  # ~1k tokens a round
    boundary = choose_boundary(messages, 2_500)
    assert messages[boundary].text() == "prompt 8", "the last two rounds fit the budget"
    assert choose_boundary(messages[:4], 10) == 0, "one turn: nothing to summarise"


def test_summary_request_is_wire_legal_even_from_a_damaged_prefix() -> None:
    prefix = [
        user("start"),
        assistant(ToolUseBlock(id="toolu_orphan", name="big", input={})),  # killed mid-tool
        user("next"),
        assistant("fine"),
    ]
    request = summary_request(prefix, model="m", system="s", max_tokens=4_000)
    validate_request(
        {"model": "m", "max_tokens": 1024, "messages": encode_messages(request.messages)}
    )
    assert SUMMARY_INSTRUCTIONS in request.messages[-1].text()
    merged = summary_request(
        [summary_message("old"), *prefix[1:]], model="m", system="", max_tokens=9
    )
    assert "Merge it" in merged.messages[-1].text()


def unmarked(value: Any) -> Any:
    """Wire content without its cache breakpoints (where they sit is not what is cached)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def test_a_summary_request_has_the_turns_prefix() -> None:
    """Same system, tools and thinking as the turn's own request: the API reads the
    conversation from its prompt cache; only the instruction after it is new."""
    prefix = [m for i in range(3) for m in tool_round(i, 400)]
    tools = (ToolSpec("big", "Returns a large blob.", {"type": "object"}),)
    turn_messages = repair_outbound([*prefix, user("the next prompt")])
    turn = ModelRequest("m", "the system", turn_messages, tools, 32_000, 16_000)
    request = summary_request(
        prefix, model="m", system="the system", max_tokens=32_000, tools=tools,
        thinking_budget=16_000,
    )  # fmt: skip
    assert 16_000 < request.max_tokens <= 16_000 + SUMMARY_MAX_TOKENS
    body, turn_body = encode_request(request), encode_request(turn)
    for key in ("tools", "system", "thinking"):
        assert body[key] == turn_body[key], key
    assert unmarked(body["messages"][:-1]) == unmarked(turn_body["messages"][:-1])
    assert SUMMARY_INSTRUCTIONS in request.messages[-1].text()


async def test_a_summary_that_calls_a_tool_gives_its_text_or_is_asked_without_tools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from defect_core.providers.anthropic import anthropic_provider

    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    tools = (ToolSpec("big", "Returns a large blob.", {"type": "object"}),)
    prefix = [m for i in range(2) for m in tool_round(i, 400)]
    request = summary_request(
        prefix, model="claude-test", system="s", max_tokens=4_000, tools=tools
    )
    with FakeProvider() as fake:
        fake.enqueue(
            Reply.tool_use(None, "big", {"n": 1}, text_before="## Goal\nwritten before a call"),
            Reply.tool_use(None, "big", {"n": 2}),
            Reply.text("## Goal\nasked again"),
        )
        provider = anthropic_provider(Settings(provider="anthropic", base_url=fake.url))
        assert await summarise(provider, request) == "## Goal\nwritten before a call"
        assert await summarise(provider, request) == "## Goal\nasked again"
        await provider.aclose()  # type: ignore[attr-defined]
    sent = [r.body for r in fake.requests]
    assert [bool(b.get("tools")) for b in sent] == [True, True, False]
    assert sent[1]["messages"] == sent[2]["messages"]


# --- the manager --------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self.written_back: list[list[Message]] = []

    async def publish(self, event: AgentEvent) -> None:
        self.events.append(event)

    async def write_back(self, history: list[Message]) -> None:
        self.written_back.append(history)


def manager(history: VecHistory, provider: Any, recorder: Recorder) -> Compactor:
    return Compactor(
        history=history,
        provider=provider,
        publish=recorder.publish,
        write_back=recorder.write_back,
        thresholds=Thresholds(micro_min_chars=1_000),
    )


async def test_background_compaction_keeps_messages_appended_meanwhile() -> None:
    history = VecHistory([m for i in range(8) for m in tool_round(i, 400)])
    slow_summary = {"text": "## Goal\nsummary of the start", "delay_ms": 300}
    recorder = Recorder()
    ctx = manager(history, ScriptedProvider([slow_summary]), recorder)
    used = ctx.estimate("", ())
    window = int(used / 0.75)  # between soft (0.70) and hard (0.85)
    with anyio.fail_after(2):
        await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    assert len(history) == 32, "background compaction must not hold up the request"
    history.append(user("appended while the summary was in flight"))
    history.append(assistant("and an answer"))
    ctx.reply_began()
    with anyio.fail_after(5):
        while not (history.snapshot() and is_summary(history.snapshot()[0])):
            await anyio.sleep(0.02)
    after = history.snapshot()
    assert after[-2].text() == "appended while the summary was in flight"
    assert after[-1].text() == "and an answer"
    assert recorder.written_back and recorder.written_back[-1] == after
    outbound = repair_outbound([*after, user("next")])
    validate_request({"model": "m", "max_tokens": 10, "messages": encode_messages(outbound)})


class CountingProvider(ScriptedProvider):
    """The offline model, counting the requests it was sent."""

    sent = 0

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        self.sent += 1
        async for chunk in super().stream(request):
            yield chunk


async def test_a_background_summary_waits_for_the_reply_beside_it_to_begin() -> None:
    """The API caches a prefix only once a response to it has begun: a summary sent beside
    the turn's request, before that, would write the whole conversation a second time."""
    history = VecHistory([m for i in range(8) for m in tool_round(i, 400)])
    provider = CountingProvider([{"text": "## Goal\nsummary of the start"}])
    ctx = manager(history, provider, Recorder())
    window = int(ctx.estimate("", ()) / 0.75)  # between soft (0.70) and hard (0.85)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    await anyio.wait_all_tasks_blocked()
    assert provider.sent == 0, "the summary waits while the turn's request has no reply"
    ctx.reply_began()
    with anyio.fail_after(5):
        while not is_summary(history.snapshot()[0]):
            await anyio.sleep(0.02)
    assert provider.sent == 1


async def test_a_waiting_background_summary_goes_when_the_next_request_is_prepared() -> None:
    """A request that never began a reply (a hook stopped the turn) does not hold the summary
    back past the next request, nor does a full compaction wait for it forever."""
    history = VecHistory([m for i in range(8) for m in tool_round(i, 400)])
    provider = CountingProvider([{"text": "## Goal\nsummary of the start"}])
    ctx = manager(history, provider, Recorder())
    window = int(ctx.estimate("", ()) / 0.75)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    await anyio.wait_all_tasks_blocked()
    assert provider.sent == 0
    with anyio.fail_after(5):
        await ctx.compact(
            model="m", system="", tools=(), max_tokens=4_000, window=window, reason="asked"
        )
    assert provider.sent >= 1 and is_summary(history.snapshot()[0])


class HeldProvider(CountingProvider):
    """The offline model, answering only once `release` is set."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        super().__init__(script)
        self.release = anyio.Event()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        self.sent += 1
        await self.release.wait()
        async for chunk in ScriptedProvider.stream(self, request):
            yield chunk


async def test_no_micro_compaction_while_a_background_summary_is_in_flight() -> None:
    """The summary's splice rewrites the cached prefix anyway: clearing results just before
    it would pay to write the whole conversation once more for nothing."""
    small = [m for i in range(8) for m in tool_round(i, 400)]
    large = [m for i in range(8, 10) for m in tool_round(i, 3_000)]
    history = VecHistory([*small, *large])
    provider = HeldProvider([{"text": "## Goal\nsummary of the start"}])
    ctx = manager(history, provider, Recorder())
    window = int(ctx.estimate("", ()) / 0.75)  # between soft (0.70) and hard (0.85)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    for i in (10, 11):  # the large results leave the protected turns
        for message in tool_round(i, 10):
            history.append(message)
    assert micro_gain(history.snapshot(), ctx.thresholds) >= ctx.thresholds.micro_batch * window
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    await anyio.wait_all_tasks_blocked()
    assert provider.sent == 1, "the summary is in flight"
    assert CLEARED_PREFIX not in str(history.snapshot()), "nothing cleared beside it"
    provider.release.set()
    with anyio.fail_after(5):
        while not is_summary(history.snapshot()[0]):
            await anyio.sleep(0.02)


async def test_full_compaction_waits_and_is_shown_as_a_think_call() -> None:
    history = VecHistory([m for i in range(8) for m in tool_round(i, 400)])
    recorder = Recorder()
    ctx = manager(history, ScriptedProvider([{"text": "## Goal\nthe summary"}]), recorder)
    window = int(ctx.estimate("", ()) / 0.95)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    snapshot = history.snapshot()
    assert is_summary(snapshot[0]) and "the summary" in snapshot[0].text()
    assert len(snapshot) < 32
    starts = [e for e in recorder.events if isinstance(e, ToolCallStarted)]
    assert [s.kind for s in starts] == ["think"]
    finals = [e for e in recorder.events if isinstance(e, ToolCallUpdated)]
    assert finals[-1].status == "completed"
    assert any(isinstance(e, UsageReported) for e in recorder.events)


async def test_a_failed_summary_is_skipped_and_history_is_untouched() -> None:
    history = VecHistory([m for i in range(8) for m in tool_round(i, 400)])
    before = history.snapshot()
    failing = {"error": {"message": "overloaded", "retryable": True}}
    recorder = Recorder()
    ctx = manager(history, ScriptedProvider([failing]), recorder)
    window = int(ctx.estimate("", ()) / 0.95)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    assert history.snapshot() == before
    finals = [e for e in recorder.events if isinstance(e, ToolCallUpdated)]
    assert finals[-1].status == "failed"


async def test_micro_compaction_alone_below_the_soft_threshold() -> None:
    history = VecHistory([m for i in range(6) for m in tool_round(i, 3_000)])
    recorder = Recorder()
    ctx = manager(history, ScriptedProvider([]), recorder)
    window = int(ctx.estimate("", ()) / 0.6)  # past micro (0.5), below soft (0.7)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    snapshot = history.snapshot()
    assert len(snapshot) == 24 and not is_summary(snapshot[0])
    assert any(
        isinstance(b, ToolResultBlock) and str(b.content).startswith(CLEARED_PREFIX)
        for m in snapshot
        for b in m.content
    )
    assert recorder.written_back, "a rewrite is written back"


async def test_micro_compaction_waits_for_a_batch_and_does_not_recur_every_turn() -> None:
    """Clearing rewrites the cached prefix from the first cleared result on: it runs only when
    it frees `micro_batch` of the window at once, so the one turn that leaves the protected
    tail next does not set off another rewrite."""
    rounds = [m for i in range(6) for m in tool_round(i, 3_000)]
    history = VecHistory([user("context " + "c" * 64_000), assistant("noted"), *rounds])
    recorder = Recorder()
    ctx = manager(history, ScriptedProvider([]), recorder)
    window = int(ctx.estimate("", ()) / 0.6)  # past micro (0.5), below soft (0.7)
    gain = micro_gain(history.snapshot(), ctx.thresholds)
    assert gain > 0
    ctx.thresholds = Thresholds(micro_min_chars=1_000, micro_batch=1.1 * gain / window)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    assert not recorder.written_back, "too little to clear: the cached prefix is kept"
    ctx.thresholds = Thresholds(micro_min_chars=1_000, micro_batch=0.9 * gain / window)
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    assert len(recorder.written_back) == 1 and micro_gain(history.snapshot(), ctx.thresholds) == 0
    assert ctx.estimate("", ()) >= 0.5 * window, "still past the micro threshold"
    for m in tool_round(6, 3_000):
        history.append(m)
    assert 0 < micro_gain(history.snapshot(), ctx.thresholds) < 0.9 * gain
    await ctx.before_request(model="m", system="", tools=(), max_tokens=4_000, window=window)
    assert len(recorder.written_back) == 1, "one turn's results wait for a batch"


# --- a long session through the real runner and the strict fake ---------------------------


class BigTool:
    name = "big"
    description = "Returns a large blob of text."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
    }
    safety = Safety.READ_ONLY
    kind = "read"

    def __init__(self, size: int = 3_000) -> None:
        self.size = size

    def describe(self, args: dict[str, Any], ctx: Any) -> ToolCallView:
        return ToolCallView(title="big", kind="read")

    async def preview(self, args: dict[str, Any], ctx: Any) -> tuple[()]:
        return ()

    def permission_key(self, args: dict[str, Any]) -> str:
        return self.name

    async def run(self, args: dict[str, Any], ctx: Any) -> ToolOutput:
        return ToolOutput(f"blob {args.get('n')}: " + "z" * self.size)


def route(summaries: list[int]) -> Any:
    """Replies by what was asked: summaries get a brief, prompts a tool call, results a long
    answer (text that micro-compaction cannot clear, so the history keeps growing)."""

    def reply(record: Any) -> Reply:
        last = record.body["messages"][-1]
        content = last["content"]
        texts = [c.get("text", "") for c in content] if isinstance(content, list) else [content]
        if any(SUMMARY_INSTRUCTIONS in t for t in texts):
            summaries.append(record.index)
            return Reply.text("## Goal\nkeep going\n## Progress\nmany blobs read")
        if isinstance(content, list) and content[0].get("type") == "tool_result":
            return Reply.text("I read it. " + "Notes on the blob. " * 60)
        return Reply.tool_use(None, "big", {"n": len(record.body["messages"])})

    return reply


async def long_core(tmp_path: Path, fake: FakeProvider, window: int) -> DefaultAgentCore:
    from defect_core.providers.anthropic import anthropic_provider

    settings = Settings(
        provider="anthropic",
        model="claude-test",
        base_url=fake.url,
        context_windows={"claude-test": window},
        retry_base_delay=0.01,
        reasoning_effort="off",
        subagent_max_depth=0,  # the window is sized for the BigTool alone
    )
    store = AsyncStore(SqliteStore(tmp_path / "sessions.sqlite3"))
    return DefaultAgentCore(
        settings, provider=anthropic_provider(settings), tools=lambda: [BigTool()], store=store
    )


async def test_a_long_session_stays_inside_its_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    window = 12_000
    summaries: list[int] = []
    with FakeProvider() as fake:
        for _ in range(200):
            fake.enqueue(route(summaries))
        core = await long_core(tmp_path, fake, window)
        session = await core.create_session("s1", tmp_path, Backends(None, None))  # type: ignore[arg-type]
        for name in ("update_plan", "ask_user"):  # the window is sized for the BigTool alone
            session.tools.remove(name)
        usages: list[UsageReported] = []
        thinks: list[ToolCallStarted] = []
        stream = session.subscribe()

        async def collect() -> None:
            async for event in stream:
                if isinstance(event, UsageReported):
                    usages.append(event)
                if isinstance(event, ToolCallStarted) and event.kind == "think":
                    thinks.append(event)

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            prompts = [f"read blob {i}" for i in range(24)]
            prompts.insert(16, "here is a long log to read:\n" + "log line\n" * 2_500)
            for prompt in prompts:
                assert await session.run_turn([TextBlock(text=prompt)]) == "end_turn"
            await core.aclose()
            await core.provider().aclose()  # type: ignore[attr-defined]
        for record in fake.requests:
            assert not record.rejected, record.error_message
            assert estimate_tokens(record.body) <= window, f"request {record.index} too large"
        bodies = [json.dumps(r.body) for r in fake.requests]
        first_micro = next(i for i, b in enumerate(bodies) if CLEARED_PREFIX in b)
        assert summaries, "a summary was requested"
        assert first_micro < summaries[0], "micro-compaction comes first"
        assert len(summaries) > len(thinks) >= 1, "background summaries, then a full one"
        assert usages and all(u.size == window for u in usages)
        # Load after compaction: the history is the compacted one, replay the original.
        reloaded = AsyncStore(SqliteStore(tmp_path / "sessions.sqlite3"))
        stored = await reloaded.load("s1")
        assert is_summary(stored.history[0])
        said = [m.text() for m in stored.transcript if m.role == "user" and m.text()]
        assert said == prompts
        await reloaded.aclose()


async def test_slash_context_and_compact_need_no_model_call(tmp_path: Path) -> None:
    script = [{"text": f"answer {i} " + "w" * 400} for i in range(6)] + [
        {"text": "## Goal\ncompacted by request"}
    ]
    core = DefaultAgentCore(Settings(), provider=ScriptedProvider(script), tools=lambda: [])
    session: DefaultSession = await core.create_session("s", tmp_path, Backends(None, None))  # type: ignore[arg-type]
    for i in range(6):
        await session.run_turn([TextBlock(text=f"question {i}")])
    texts: list[str] = []
    stream = session.subscribe()

    async def collect() -> None:
        async for event in stream:
            if hasattr(event, "text") and type(event).__name__ == "AgentTextDelta":
                texts.append(event.text)

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect)
        assert await session.run_turn([TextBlock(text="/context")]) == "end_turn"
        assert await session.run_turn([TextBlock(text="/compact keep the questions")]) == "end_turn"
        assert await session.run_turn([TextBlock(text="/context")]) == "end_turn"
        await core.aclose()
    assert "Context: ~" in texts[0] and "of 200,000 tokens" in texts[0]
    assert texts[1].startswith("Compacted ")
    assert "compacted: it starts with a summary" in texts[2]
    history = session.history_snapshot()
    assert is_summary(history[0]) and "compacted by request" in history[0].text()
    assert not any("/context" in m.text() for m in session.transcript()), "commands are not history"
    names = [c.name for c in session.slash_commands()]
    assert names == ["compact", "context", "goal", "rewind", "trust", "fork", "help"]


async def test_an_oversized_tool_result_is_refused_with_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    with FakeProvider() as fake:
        fake.enqueue(Reply.tool_use(None, "big", {"n": 1}), Reply.text("understood"))
        from defect_core.providers.anthropic import anthropic_provider

        settings = Settings(
            provider="anthropic",
            model="claude-test",
            base_url=fake.url,
            context_windows={"claude-test": 20_000},
            reasoning_effort="off",
        )
        core = DefaultAgentCore(
            settings, provider=anthropic_provider(settings), tools=lambda: [BigTool(60_000)]
        )
        session = await core.create_session("s", tmp_path, Backends(None, None))  # type: ignore[arg-type]
        assert await session.run_turn([TextBlock(text="go")]) == "end_turn"
        result = session.history_snapshot()[2].content[0]
        assert isinstance(result, ToolResultBlock) and result.is_error
        assert "more than the context window" in str(result.content)
        assert not fake.requests[-1].rejected
        body = json.dumps(fake.requests[-1].body)
        assert "z" * 1000 not in body
        await core.aclose()
        await core.provider().aclose()  # type: ignore[attr-defined]


async def test_prompt_too_long_compacts_and_retries_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    summaries: list[int] = []
    answered = route(summaries)
    refused: list[int] = []

    def too_long_once(record: Any) -> Reply:
        if not refused and len(record.body["messages"]) > 20:
            refused.append(record.index)
            return Reply.error(400, "prompt is too long: 210000 tokens > 200000 maximum")
        return answered(record)

    with FakeProvider() as fake:
        for _ in range(120):
            fake.enqueue(too_long_once)
        core = await long_core(tmp_path, fake, 1_000_000)  # the estimate never triggers
        session = await core.create_session("s", tmp_path, Backends(None, None))  # type: ignore[arg-type]
        for i in range(8):
            assert await session.run_turn([TextBlock(text=f"read blob {i}")]) == "end_turn"
        await core.aclose()
        await core.provider().aclose()  # type: ignore[attr-defined]
    assert refused and summaries, "the refusal led to a summary"
    assert summaries[0] > refused[0]
    retried = fake.requests[summaries[0] + 1]
    assert not retried.rejected and retried.outcome == "completed"
    assert is_summary(session.history_snapshot()[0])
