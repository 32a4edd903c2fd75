"""Claude's prompt cache across a switch to an OpenAI-compatible model and back.

The turns another provider answers append messages Claude never saw, so Claude's first
request back has its newest breakpoints far past the prefix it cached before the switch, out
of the API's 20-block look-back. `providers/anthropic/last_sent.py` remembers the last prompt
sent per conversation, and `request.py` puts the second message breakpoint where that prompt
ended when no other breakpoint reaches it:

- as data: where the breakpoint lands (≤ 4 in all), that nothing moves when it is not needed,
  and, through the fake's prompt cache simulation (`defect_fakeapi/cache.py`), that the
  request back reads the whole earlier prompt;
- `LastSent`: a conversation extended, rewritten, under another key, and the bound;
- through the real `defect acp` process against the strict fakes (Claude with its cache
  simulated, the chat server with its automatic prefix cache): Claude → chat → Claude, the
  first Claude request after the switch reads all of the last one before it, and every chat
  request reads the whole of the chat request before it (its copy is byte-stable, the ids
  the Messages wire forbids mapped the same way each time).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.model import Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock, user
from defect_core.providers.anthropic.last_sent import LastSent
from defect_core.providers.anthropic.request import cache_key, encode_request
from defect_core.providers.base import ModelRequest
from defect_fakeapi import (
    ChatPrefixCache,
    FakeProvider,
    PromptCache,
    Reply,
    count_cache_breakpoints,
    validate_request,
)
from defect_fakeapi import (
    ToolUseBlock as ScriptedToolUse,
)
from tests.support.acp_harness import agent_env, spawn_defect

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"key": {"type": "string"}}}
TOOLS = (ToolSpec("lookup", "Look a key up.", SCHEMA),)


def loop(history: list[Message], prefix: str, steps: int) -> list[Message]:
    """`history`, then `steps` rounds of one tool call and its result."""
    out = list(history)
    for step in range(steps):
        call = f"toolu_{prefix}{step}"
        out.append(
            Message(
                role="assistant",
                content=(ToolUseBlock(id=call, name="lookup", input={"key": call}),),
            )
        )
        out.append(
            Message(
                role="user",
                content=(ToolResultBlock(tool_use_id=call, content=f"value {step} " * 40),),
            )
        )
    return out


def switched(foreign_steps: int) -> tuple[list[Message], int]:
    """A history Claude answered up to its first `seen` messages, then another provider's
    tool loop of `foreign_steps` rounds, then a new prompt: (history, seen)."""
    claude = loop([user("look everything up")], "a", 3)
    foreign = loop([*claude, Message(role="assistant", content=(TextBlock(text="Done."),))], "c", 0)
    foreign = loop([*foreign, user("now with the other model")], "c", foreign_steps)
    foreign.append(Message(role="assistant", content=(TextBlock(text="All looked up."),)))
    return [*foreign, user("back to Claude")], len(claude)


def marked(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [
        (m, b)
        for m, message in enumerate(body["messages"])
        for b, block in enumerate(message["content"])
        if "cache_control" in block
    ]


def request(messages: list[Message]) -> ModelRequest:
    return ModelRequest("claude-sonnet-5-5", "system prompt", messages, TOOLS, 8000)


async def test_the_second_breakpoint_lands_where_claude_left_off() -> None:
    history, seen = switched(15)  # 30 blocks of the other model's: out of any look-back
    body = encode_request(request(history), seen=seen)
    last = len(history) - 1
    assert marked(body) == [(seen - 1, 0), (last, 0)], "Claude's last result, and the newest"
    assert count_cache_breakpoints(body) == 4
    validate_request(body)
    plain = encode_request(request(history))
    assert marked(plain) == [(last - 2, 0), (last, 0)], "without it: the last two user messages"


async def test_nothing_moves_when_a_breakpoint_reaches_the_earlier_prompt() -> None:
    history, seen = switched(3)  # within the newest breakpoint's 20-block look-back
    assert encode_request(request(history), seen=seen) == encode_request(request(history))
    # The session that never switched: its last prompt ended at the previous user message.
    ordinary = loop([user("look everything up")], "a", 12)
    previous = len(ordinary) - 2
    assert encode_request(request(ordinary), seen=previous) == encode_request(request(ordinary))


async def test_the_request_back_reads_the_whole_earlier_prompt_from_the_cache() -> None:
    history, seen = switched(15)
    for resumed, expected_read in ((True, "all"), (False, "tools and system only")):
        cache = PromptCache(min_tokens=1)
        before = cache.account(encode_request(request(history[:seen])), "claude-sonnet-5-5")
        body = encode_request(request(history), seen=seen if resumed else None)
        back = cache.account(body, "claude-sonnet-5-5")
        if expected_read == "all":
            assert back.cache_read_input_tokens == before.total
        else:
            assert 0 < back.cache_read_input_tokens < before.total / 2


async def test_last_sent_answers_only_a_conversation_that_extends_its_last_prompt() -> None:
    history, seen = switched(15)
    key = cache_key(request(history))
    sent = LastSent(capacity=2)
    assert sent.seen_until(key, history) is None
    sent.remember(key, history[:seen])
    assert sent.seen_until(key, history) == seen
    assert sent.seen_until(("another-model", None), history) is None, "a cache is per model"
    rewritten = [history[0], user("a cleared result"), *history[2:]]
    assert sent.seen_until(key, rewritten) is None, "a prefix the cache does not hold"
    # A copy of the conversation (equal messages, other objects) is the same conversation.
    copied = [Message(role=m.role, content=m.content) for m in history]
    assert sent.seen_until(key, copied) == seen
    # The next prompt of the conversation replaces its last one.
    sent.remember(key, history)
    assert sent.seen_until(key, [*history, user("more")]) == len(history)
    # Other conversations push the oldest out, past the capacity.
    for n in range(2):
        sent.remember(key, [user(f"conversation {n}")])
    assert sent.seen_until(key, [*history, user("more")]) is None
    assert sent.seen_until(key, [user("conversation 1"), user("more")]) == 1


# --- through the real process -----------------------------------------------------------------

ALPHA_KEY = "sk-ant-api03-alpha-test-key"
LOCAL_KEY = "sk-local-test-key"
FOREIGN_CALLS = 12
"""The chat model's tool calls: 24 blocks, past the 20-block look-back."""


def configure(tmp_path: Path, alpha: FakeProvider, chat: FakeProvider) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for n in range(FOREIGN_CALLS):
        (work / f"module_{n}.py").write_text(
            "\n".join(f"def f_{n}_{i}(x: int) -> int:\n    return x + {i}\n" for i in range(30))
        )
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'provider = "alpha"\n[providers.alpha]\nkind = "anthropic"\nbase_url = "{alpha.url}"\n'
        'api_key_env = "ALPHA_KEY"\nmodels = ["claude-sonnet-5-5"]\n'
        f'[providers.local]\nkind = "openai"\nbase_url = "{chat.url}/v1"\n'
        'api_key_env = "LOCAL_KEY"\nmodels = ["tiny-coder"]\n'
        '[providers.local.model_settings."tiny-coder"]\ncontext_window = 200000\n'
        '[context_windows]\n"claude-sonnet-5-5" = 200000\n'
    )
    return work


async def test_claude_reads_back_its_prefix_after_a_chat_model_answered_in_between(
    tmp_path: Path,
) -> None:
    with (
        FakeProvider(api_key=ALPHA_KEY, prompt_cache=PromptCache()) as alpha,
        FakeProvider(api_key=LOCAL_KEY) as chat,
    ):
        chat.chat_prompt_cache = ChatPrefixCache()
        work = configure(tmp_path, alpha, chat)
        alpha.enqueue(
            Reply.tool_use(None, "read_file", {"path": "module_0.py"}),
            Reply.tool_use(None, "read_file", {"path": "module_1.py"}),
            Reply.text("Two modules read."),
            Reply.text("Claude again."),
        )
        # Ids in a shape the Messages wire forbids: mapped, and mapped alike on every request.
        chat.enqueue(
            *(
                Reply.of(
                    [
                        ScriptedToolUse(
                            f"functions.read_file:{n}", "read_file", {"path": f"module_{n}.py"}
                        )
                    ],
                    stop_reason="tool_use",
                )
                for n in range(FOREIGN_CALLS)
            ),
            Reply.text("Every module read."),
        )
        env = agent_env(
            ALPHA_KEY=ALPHA_KEY,
            LOCAL_KEY=LOCAL_KEY,
            DEFECT_REASONING_EFFORT="off",
            DEFECT_STATE_DIR=str(tmp_path / "state"),
            XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        )
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(work)
            assert (await agent.prompt(sid, "Read two modules.")).stop_reason == "end_turn"
            await agent.conn.set_config_option(
                session_id=sid, config_id="model", value="local/tiny-coder"
            )
            assert (await agent.prompt(sid, "Now read them all.")).stop_reason == "end_turn"
            await agent.conn.set_config_option(
                session_id=sid, config_id="model", value="alpha/claude-sonnet-5-5"
            )
            assert (await agent.prompt(sid, "And back.")).stop_reason == "end_turn"
            for fake in (alpha, chat):
                await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))
            agent.assert_schema_clean()

    assert not any(r.rejected for r in [*alpha.requests, *chat.requests])
    assert len(alpha.requests) == 4 and len(chat.requests) == FOREIGN_CALLS + 1
    before, back = alpha.requests[2].cache_usage, alpha.requests[3].cache_usage
    assert before is not None and back is not None
    assert back.cache_read_input_tokens == before.total, "all of Claude's last prompt is read"
    assert count_cache_breakpoints(alpha.requests[3].body) == 4
    # The chat copy is byte-stable: each request starts with the whole request before it,
    # and the server's prefix cache reads all of it (in its steps of 128 tokens).
    cache = chat.chat_prompt_cache
    for earlier, later in zip(chat.requests, chat.requests[1:], strict=False):
        sent, now = earlier.body["messages"], later.body["messages"]
        assert json.dumps(now[: len(sent)]) == json.dumps(sent)
        assert earlier.cache_usage is not None and later.cache_usage is not None
        assert later.cache_usage.cache_read_input_tokens == cache.rounded(earlier.cache_usage.total)
