"""`VecHistory`: the source of truth of a session and its token accounting
(`defect_core/history.py`).

Pins: the estimate is the last real input size plus chars/4 of what was appended since, or the
chars/4 of everything when there is no baseline (images a flat 2,000), `None` when empty;
`replace` and `splice_prefix` drop the baseline; `splice_prefix` keeps the tail appended while a
background compaction was summarising, and clamps a stale `drop_count`; `snapshot` is a copy;
and the lock keeps all of it consistent under threads.
"""

from __future__ import annotations

import threading

from defect_core.history import (
    IMAGE_TOKEN_ESTIMATE,
    History,
    VecHistory,
    estimate_message_tokens,
)
from defect_core.model import (
    ImageBlock,
    JsonPart,
    Message,
    RedactedThinkingBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    user,
)


def text_of_tokens(tokens: int) -> str:
    return "x" * (4 * tokens)


# --------------------------------------------------------------------------------------------
# Estimating one message


def test_message_estimate_is_chars_over_four_per_block_with_flat_images() -> None:
    message = Message(
        role="assistant",
        content=(
            assistant(text_of_tokens(10)).content[0],
            ThinkingBlock(thinking="t" * 30, signature="s" * 10),  # 40 chars -> 10
            RedactedThinkingBlock(data="d" * 8),  # 2
            ToolUseBlock(id="toolu_1", name="bash", input={"c": "ls"}),  # 4 + 11 chars -> 3
        ),
    )
    assert estimate_message_tokens(message) == 10 + 10 + 2 + 3


def test_results_and_images_estimate() -> None:
    result = ToolResultBlock(
        tool_use_id="toolu_1",
        content=(
            assistant(text_of_tokens(5)).content[0],
            JsonPart(value=[1, 2, 3]),  # "[1, 2, 3]" is 9 chars -> 2
            ImageBlock(media_type="image/png", data="AAAA"),
        ),
    )
    message = user(result, ImageBlock(url="https://example.test/a.png"))
    assert estimate_message_tokens(message) == 5 + 2 + IMAGE_TOKEN_ESTIMATE + IMAGE_TOKEN_ESTIMATE
    assert IMAGE_TOKEN_ESTIMATE == 2_000
    assert estimate_message_tokens(user(ToolResultBlock(tool_use_id="t", content="y" * 40))) == 10


# --------------------------------------------------------------------------------------------
# Accounting over appends


def test_empty_history_has_no_estimate() -> None:
    history = VecHistory()
    assert history.token_estimate() is None
    assert len(history) == 0


def test_without_a_baseline_the_whole_history_is_estimated() -> None:
    history = VecHistory()
    history.append(user(text_of_tokens(100)))
    assert history.token_estimate() == 100
    history.append(assistant(text_of_tokens(20)))
    history.append(user(ImageBlock(media_type="image/png", data="AAAA")))
    assert history.token_estimate() == 100 + 20 + IMAGE_TOKEN_ESTIMATE


def test_baseline_plus_delta_of_what_was_appended_since() -> None:
    history = VecHistory([user(text_of_tokens(999))])
    history.record_input_tokens(5_000)
    assert history.token_estimate() == 5_000  # the real size replaces the heuristic
    history.append(assistant(text_of_tokens(10)))
    history.append(user(text_of_tokens(7)))
    assert history.token_estimate() == 5_017
    # A new real figure resets the delta.
    history.record_input_tokens(6_000)
    assert history.token_estimate() == 6_000
    history.append(assistant(text_of_tokens(3)))
    assert history.token_estimate() == 6_003


def test_a_baseline_on_an_empty_history_counts() -> None:
    history = VecHistory()
    history.record_input_tokens(1_200)  # e.g. the system prompt and tools alone
    assert history.token_estimate() == 1_200


def test_initial_messages_are_copied() -> None:
    initial = [user("a"), assistant("b")]
    history = VecHistory(initial)
    initial.append(user("c"))
    assert len(history) == 2


# --------------------------------------------------------------------------------------------
# Writing back compaction results


def test_replace_writes_the_list_and_clears_the_baseline() -> None:
    history = VecHistory([user(text_of_tokens(50)), assistant(text_of_tokens(50))])
    history.record_input_tokens(9_000)
    summary = user(text_of_tokens(12))
    history.replace([summary])
    assert history.snapshot() == [summary]
    assert history.token_estimate() == 12  # heuristic again, until the next real figure
    history.append(assistant(text_of_tokens(3)))
    assert history.token_estimate() == 15


def test_replace_copies_its_argument() -> None:
    history = VecHistory()
    new = [user("x")]
    history.replace(new)
    new.append(assistant("y"))
    assert len(history) == 1


def test_splice_prefix_keeps_the_tail_appended_during_a_background_compaction() -> None:
    history = VecHistory()
    for n in range(10):
        history.append(user(f"u{n}") if n % 2 == 0 else assistant(f"a{n}"))
    history.record_input_tokens(40_000)

    snapshot = history.snapshot()  # the compaction starts from here
    late = [user("arrived while summarising"), assistant("and its answer")]
    for message in late:
        history.append(message)
    summary = user("summary of u0..a9")

    dropped = history.splice_prefix(len(snapshot), summary)

    assert dropped == 10
    assert history.snapshot() == [summary, *late]
    assert history.snapshot()[1] is late[0]
    assert history.token_estimate() == sum(estimate_message_tokens(m) for m in [summary, *late]), (
        "the baseline described the old list and must be gone"
    )


def test_splice_prefix_clamps_a_drop_count_beyond_the_end() -> None:
    history = VecHistory([user("a"), assistant("b"), user("c")])
    summary = user("summary")
    assert history.splice_prefix(7, summary) == 3
    assert history.snapshot() == [summary]


def test_splice_prefix_with_nothing_to_drop_puts_the_summary_first() -> None:
    history = VecHistory([user("a")])
    summary = user("summary")
    assert history.splice_prefix(0, summary) == 0
    assert history.snapshot() == [summary, user("a")]
    assert history.splice_prefix(-3, summary) == 0
    assert len(history) == 3


# --------------------------------------------------------------------------------------------
# Snapshots and threads


def test_snapshot_is_a_copy() -> None:
    history = VecHistory([user("a")])
    snap = history.snapshot()
    snap.append(assistant("injected"))
    snap.clear()
    assert history.snapshot() == [user("a")]
    before = history.snapshot()
    history.append(assistant("b"))
    assert before == [user("a")], "a snapshot does not see later appends"


def test_concurrent_appends_keep_length_and_estimate_consistent() -> None:
    history: History = VecHistory()
    history.record_input_tokens(1_000)
    threads_n, per_thread = 8, 300
    start = threading.Barrier(threads_n + 1)
    observed: list[tuple[int, int | None]] = []

    def writer(t: int) -> None:
        start.wait()
        for n in range(per_thread):
            history.append(user(text_of_tokens(1 + (t + n) % 5)))

    def reader() -> None:
        start.wait()
        for _ in range(200):
            snap = history.snapshot()
            observed.append((len(snap), history.token_estimate()))

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
    watcher = threading.Thread(target=reader)
    for thread in [*workers, watcher]:
        thread.start()
    for thread in [*workers, watcher]:
        thread.join()

    messages = history.snapshot()
    assert len(history) == len(messages) == threads_n * per_thread
    expected = 1_000 + sum(1 + (t + n) % 5 for t in range(threads_n) for n in range(per_thread))
    assert history.token_estimate() == expected
    assert expected == 1_000 + sum(estimate_message_tokens(m) for m in messages)
    # Seen from another thread, the history only grows and the estimate never goes back.
    lengths = [length for length, _ in observed]
    estimates = [estimate or 0 for _, estimate in observed]
    assert lengths == sorted(lengths)
    assert estimates == sorted(estimates)


def test_running_total_matches_a_full_recount_through_every_rewrite() -> None:
    from defect_core.history import estimate_message_tokens
    from defect_core.model import TextBlock, ToolUseBlock, assistant, user

    history = VecHistory()
    for i in range(50):
        history.append(user(f"prompt {i} " * 20))
        history.append(assistant(TextBlock(text="x" * i), ToolUseBlock(id=f"t{i}", name="n")))

    def recount() -> int:
        return sum(estimate_message_tokens(m) for m in history.snapshot())

    assert history.token_estimate() == recount()
    history.splice_prefix(30, user("summary " * 40))
    assert history.token_estimate() == recount()
    history.replace(history.snapshot()[5:])
    assert history.token_estimate() == recount()
    history.append(user("tail"))
    assert history.token_estimate() == recount()


def test_non_ascii_text_is_counted_by_utf8_bytes() -> None:
    from defect_core.model import user

    history = VecHistory([user("漢" * 400)])  # 3 bytes each in UTF-8
    assert history.token_estimate() == 300


def test_a_history_given_whole_is_measured_on_first_need_with_what_came_since() -> None:
    loaded = [user("x" * 400), assistant("y" * 800), user("z" * 40)]
    later = assistant("w" * 4000)
    each = [estimate_message_tokens(m) for m in [*loaded, later]]

    appended = VecHistory(loaded)
    appended.append(later)  # before anything asked for the size
    assert appended.token_estimate() == sum(each)

    spliced = VecHistory(loaded)
    summary = user("summary " * 10)
    assert spliced.splice_prefix(2, summary) == 2
    assert spliced.token_estimate() == estimate_message_tokens(summary) + each[2]

    replaced = VecHistory()
    replaced.replace([*loaded, later])
    replaced.append(user("q" * 80))
    assert replaced.token_estimate() == sum(each) + 20
