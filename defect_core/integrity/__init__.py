"""Make a history snapshot wire-legal for the Messages API, just before it is sent.

Owns the outbound copy's rules and their users: `rules.py` states each rule once (`RULES`: a
name, what the copy guarantees, what the repair does), `validate.py` reports which rule a
history breaks and where, `proven.py` remembers the prefixes already proven clean, and
`repair.py` lays out the copy that breaks none (`repair_outbound`, the one function every
request to a provider goes through, the main-loop request and the summarisation sub-request of
compaction; pure but for that memo, which never changes an answer) and holds
`drop_malformed_tool_uses`, the filter the turn runner applies to a message assembled from a
stream before it is committed or any of its tool calls run. docs/architecture.md (Integrity)
lists the rules from the same table. `rules.py` also states the Chat Completions wire's rules
(`CHAT_RULES`): the copy converted for an OpenAI-compatible provider keeps them, and
`providers/openai_wire.py` checks them before it is sent.

Invariant: `repair_outbound(h)` breaks no rule of `RULES` whatever `h` is, never mutates `h`,
returns `h` itself when it breaks none, and is idempotent.

## Why this is needed

The turn runner commits an assistant message that asks for tools and, later, the user message
that carries their results: two writes. Anything between them - a provider failure, a
`session/cancel`, a SIGKILL, a power cut - leaves an orphan `tool_use` in the stored history.
The API rejects such a request for good (``tool_use ids were found without tool_result blocks
immediately after``), so without a repair one interruption kills the session: every later
request fails the same way. Interruptions cannot be prevented (the process can be killed at
any instant), so the tolerance has to live on the read side, before the request is sent.
Compaction, replays of old databases and stream errors add their own damage: results whose
use was summarised away, duplicated blocks, empty messages, unsigned thinking, images stored
by an older defect or returned by a tool that the API would refuse.

## Placement: at request construction, never in `snapshot`, storage or replay

`History.snapshot()` means "faithfully read what is stored". Injecting synthetic results there
would make what is read differ from what is stored, and worse, compaction goes
`snapshot() -> summarise -> replace()`: blocks meant only for the provider would be written
back into the source of truth. So history, the SQLite store and the UI replay keep the real
sequence (an orphan stays an unclosed tool call, which is the truth), and only the copy sent
to the provider is patched - here, at request construction.

## Cost

Every request sends the whole history, so the check is written for speed. A session's history
only grows at its tail between two requests, so the clean check (`proven.clean_prefix`) walks
only what no earlier request proved: a prefix proven clean is remembered as its message objects
(`prefix_memo.py`) and recognised by identity or equality (one pointer comparison per message,
in C), and a rewind or a compaction, which replace those objects, is walked afresh. The walk
itself is one O(n) scan of exact-type checks and attribute reads (no copy, no model
construction; the call ids are checked against the pattern in bulk). A history that breaks no
rule is returned itself. Otherwise the rebuild starts at the end of the proven prefix (laid out
as it is) and goes on in one linear pass that emits undamaged stretches as they are, takes
damaged messages apart block by block, and reuses every message that needs no change (new
messages are built with `model.trusted_message` from blocks that are validated values
already). An image's verdict is worked out once per block object (`media.image_block_problem`
keeps it), so later requests pay a dictionary look-up per image, not a base64 decode.
`scripts/bench_repair.py` measures it.
"""

from __future__ import annotations

from defect_core.integrity.repair import (
    Repair,
    drop_malformed_tool_uses,
    repair,
    repair_outbound,
)
from defect_core.integrity.rules import (
    CONTINUE_TEXT,
    IMAGE_REMOVED_TEXT,
    INTERRUPTED_RESULT_TEXT,
    OPENING_TEXT,
    RULES,
    Rule,
    is_well_formed_tool_use,
)
from defect_core.integrity.validate import Violation, is_wire_legal, violations

__all__ = [
    "CONTINUE_TEXT",
    "IMAGE_REMOVED_TEXT",
    "INTERRUPTED_RESULT_TEXT",
    "OPENING_TEXT",
    "RULES",
    "Repair",
    "Rule",
    "Violation",
    "drop_malformed_tool_uses",
    "is_well_formed_tool_use",
    "is_wire_legal",
    "repair",
    "repair_outbound",
    "violations",
]
