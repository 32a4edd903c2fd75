"""The words that ask a model to summarise a conversation (compaction's brief).

Owns `SUMMARY_INSTRUCTIONS` (the brief: sections and what to keep), `MERGE_INSTRUCTIONS`
(how to fold an earlier summary in) and `KEPT_INSTRUCTIONS` (where the summary stops: the
request shows the whole conversation, so that the API reads it from its prompt cache, and its
latest messages are kept as they are). Compaction (`compaction.py`) sends them as the last user
message of a summarisation request; the offline model (`providers/scripted.py`) recognises
them there and answers with a summary, so `make run` and the tests can compact without a
network.

Invariant: plain text that imports nothing. It sits at the bottom of the layers
(docs/layers.md) so that both its sender (compaction, above the providers) and its reader (a
provider) share one statement of it without a provider importing compaction.
"""

from __future__ import annotations

SUMMARY_INSTRUCTIONS = """\
Summarise the conversation above so that the work can continue from your summary alone; the
messages it covers will be removed. Write a structured brief with these sections:

## Goal
## Constraints and preferences
## Progress (what was done, with results)
## Decisions (and why)
## Next steps
## Relevant files (paths, with what matters about each)

Be specific: keep file paths, names, commands, error messages and numbers. Do not call tools."""

MERGE_INSTRUCTIONS = """\
The conversation began with an earlier summary (between {open} and {close}). Merge it with what
happened since into one brief of the same structure: keep what still matters from it, update
progress, and drop what is obsolete."""

KEPT_INSTRUCTIONS = """\
Summarise only what comes before the last {count} messages above (they begin with the user
message starting: {start}). Those messages stay in the conversation as they are, after your
summary: do not summarise them."""
