"""`defect transcript`: scripted JSON-RPC sessions, played against `defect acp` or recorded.

A tool beside the agent, not part of it: like an editor, it starts `defect acp` as a process
(through `defect_acp.client`, the package's client API) and speaks JSON-RPC to it over stdio,
as raw lines — it must be able to send what no SDK would. It imports nothing of the server,
the runtime or the ACP SDK (an import-linter contract in pyproject.toml, docs/layers.md), so a
transcript proves what the wire does, never what the code meant. `defect_cli.cli` only hands
it the `transcript` subcommand.

Owns the transcript feature, one job per module, each importing only those above it:
- `format` — the transcript format (JSON lines: an optional header, then one client step or
  one expectation on the agent's messages per line): `load_transcript`, `parse_transcript`,
  `TranscriptError`.
- `patterns` — `${…}` variables and what a pattern means: `Variables`, `match`, `closeness`.
- `agent` — the agent under test, in its own process group, read line by line:
  `AgentProcess`, `StepFailed`.
- `stage` — what one run stands on: the throw-away workspace and state directory, the
  agent's environment and command, the provider fake, starting and ending the processes
  (`Stage`, `RunOptions`).
- `steps` — what each step kind means, played in order against the agent (`Play`).
- `runner` — `run_transcript` (sets the stage, plays the steps, tears down), `run_files`,
  and the failure report.
- `recorder` — `record`: a proxy between a real client and the agent that writes what passed
  as a replayable transcript (`to_transcript`).
- `cli` — the `transcript run|record` commands (`add_parser`, `main`; also `python -m
  defect_transcript`).
This package re-exports the names the rest of defect and its tests use, so
`import defect_transcript; defect_transcript.main(...)` does not care about the split.

Invariants:
- A run never outlives its transcript: the agent (and a provider fake) start in their own
  process group, every waiting step has a timeout, and the whole group is killed when the run
  ends — passed, failed, timed out or interrupted.
- Expectations match the agent's messages in the order the agent wrote them. While waiting,
  only `session/update` notifications are skipped by default; an unexpected response, error
  or agent request fails the step at once, showing it. A transcript never passes because
  something it did not ask for was silently skipped.
- The recorder writes nothing literally that varies between runs: session and tool-call ids
  become captures, workspace paths `${workspace}`, versions, times, error messages and token
  counts type patterns, and streamed chunks are joined into one `expect_text` (or relaxed to
  "some chunk" when the client interrupted the stream).
- A transcript runs without keys: the agent gets the caller's environment minus `DEFECT_*`,
  `ANTHROPIC_*` and `AWS_*`, plus what the header selects (the offline model, a script for it,
  or a provider fake on 127.0.0.1).
- Module level imports only the standard library (and `defect_acp.client`, which imports
  nothing else), in every module here: `defect --help` stays fast.

Why: defect is driven by scripted JSON-RPC in CI — its own and its users'. A transcript is the
conversation written down (what the client sends, what it expects back), readable in a diff,
checked on every commit, and short enough to write by hand or capture from a real editor.
One module per job keeps each of those promises next to the code that keeps it.

The format (see docs/transcripts.md for the full reference):

    // comments: lines starting with // or #
    {"transcript": 1, "timeout": 10, "offline_script": [{"text": "Hi!"}]}
    {"send": {"id": 1, "method": "initialize", "params": {"protocolVersion": 1}}}
    {"expect": {"id": 1, "result": {"protocolVersion": 1}}}
    {"send": {"id": 2, "method": "session/new", "params": {"cwd": "${workspace}", "mcpServers": []}}}
    {"expect": {"id": 2, "result": {"sessionId": {"$capture": "sid"}}}}
    {"send": {"id": 3, "method": "session/prompt", "params": {"sessionId": "${sid}", "prompt": [{"type": "text", "text": "hello"}]}}}
    {"expect_text": "Hi!"}
    {"expect": {"id": 3, "result": {"stopReason": "end_turn"}}}
"""  # noqa: E501

from __future__ import annotations

from defect_transcript.agent import AgentProcess, Incoming, StepFailed
from defect_transcript.cli import add_parser, build_parser, main
from defect_transcript.format import (
    FORMAT_VERSION,
    Header,
    Step,
    Transcript,
    TranscriptError,
    load_transcript,
    parse_transcript,
)
from defect_transcript.patterns import Mismatch, Variables, closeness, match
from defect_transcript.recorder import Recorded, record, to_transcript
from defect_transcript.runner import (
    Outcome,
    RunOptions,
    expand_paths,
    run_files,
    run_transcript,
)

__all__ = [
    "FORMAT_VERSION",
    "AgentProcess",
    "Header",
    "Incoming",
    "Mismatch",
    "Outcome",
    "Recorded",
    "RunOptions",
    "Step",
    "StepFailed",
    "Transcript",
    "TranscriptError",
    "Variables",
    "add_parser",
    "build_parser",
    "closeness",
    "expand_paths",
    "load_transcript",
    "main",
    "match",
    "parse_transcript",
    "record",
    "run_files",
    "run_transcript",
    "to_transcript",
]
