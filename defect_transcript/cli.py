"""The `transcript run|record` commands: `add_parser` (for `defect`), `build_parser`, `main`.

Owns the arguments of `defect transcript run|record` and what each action calls: `run_files`
or `record`. `defect transcript …` (through `defect_cli.cli`) and `python -m
defect_transcript …` (through `__main__.py`) both end in `main`.

Invariant: the exit status is the contract — 0 when no transcript failed (skips are fine) or
the recording was written, 1 when a transcript failed, 2 without an action (after the help).
Only the standard library is imported, so `defect --help`, which builds this parser, stays
fast.

Why: CI scripts and editors' test set-ups call these commands and read only their status and
their report.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from defect_transcript.recorder import record
from defect_transcript.runner import RunOptions, run_files

RUN_DESCRIPTION = """\
Play transcript files (JSON lines: client steps and expectations on the agent's messages)
against a freshly spawned `defect acp` over real stdio, each in its own temporary workspace
and state directory. A directory stands for its *.jsonl files. Exit status 0 when none
failed, 1 otherwise. The format is documented in docs/transcripts.md."""

RECORD_DESCRIPTION = """\
Sit between a client and the agent and write what passes as a replayable transcript: client
messages become steps, agent messages expectations, with what varies (session and tool-call
ids, workspace paths, times, versions) normalised. Put it where an editor spawns the agent:
`defect transcript record --out session.jsonl -- defect acp`. With --client CMD, the recorder
spawns the client itself and connects it. The agent command defaults to this `defect acp`."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `transcript run|record` to a `defect` subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "transcript",
        help="play or record scripted JSON-RPC transcripts (for CI)",
        description="Play or record scripted JSON-RPC transcripts of ACP sessions.",
    )
    actions = parser.add_subparsers(dest="transcript_command", metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="play transcript files against a fresh agent",
        description=RUN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("files", nargs="+", metavar="FILE", help="transcript files or directories")
    run.add_argument(
        "--timeout", type=float, help="seconds a waiting step may take (overrides the header)"
    )
    run.add_argument("--verbose", "-v", action="store_true", help="show every step and message")
    run.add_argument("--keep", action="store_true", help="keep the temporary workspace")
    rec = actions.add_parser(
        "record",
        help="proxy a client and the agent, and write a transcript",
        description=RECORD_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rec.add_argument(
        "--out", "-o", type=Path, default=Path("transcript.jsonl"), help="transcript to write"
    )
    rec.add_argument("--client", help="spawn this client command instead of using stdin/stdout")
    rec.add_argument(
        "agent", nargs=argparse.REMAINDER, metavar="-- AGENT...", help="the agent command"
    )
    parser.set_defaults(transcript_parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="defect")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_parser(sub)
    return parser


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Run `transcript run|record` from parsed arguments (or an argv after `transcript`)."""
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(["transcript", *(sys.argv[1:] if args is None else args)])
    action = getattr(args, "transcript_command", None)
    if action == "run":
        options = RunOptions(timeout=args.timeout, verbose=args.verbose, keep=args.keep)
        return asyncio.run(run_files(args.files, options))
    if action == "record":
        agent = list(args.agent)
        if agent and agent[0] == "--":
            agent = agent[1:]
        if not agent:
            agent = [sys.executable, "-m", "defect_cli", "acp"]
        client = shlex.split(args.client) if args.client else None
        return asyncio.run(record(agent, args.out, client_command=client))
    parser = getattr(args, "transcript_parser", None)
    if parser is not None:
        parser.print_help(sys.stderr)
    return 2
