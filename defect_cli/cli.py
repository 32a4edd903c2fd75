"""The `defect` command.

Owns argument parsing and process set-up for `defect acp` (serve ACP on stdio, on a core
wired by `defect_cli/wiring.py`), `defect exec`, `defect transcript`, `defect fake-api`,
`defect --version` and `defect --help`.

Invariants:
- Before anything else, the real stdout descriptor is set aside for the protocol and fd 1 is
  pointed at stderr: a library (or a child process) that prints can never corrupt the
  JSON-RPC stream. Only `defect_acp.transport` writes to the protocol descriptor.
- `defect fake-api` serves the strict fake Anthropic/Bedrock API (`defect_fakeapi`), for
  `provider_fake` transcripts and offline runs; it is imported only for that command.
- `defect exec [--goal G] [--mode M] [--output text|json|stream-json]
  [--input-format text|stream-json] [--trust-project]
  "prompt"` runs one turn (or a goal) without an editor (`defect_cli/headless.py`: its output,
  exit codes and project trust). The prompt may come from stdin (`-`, or a pipe and no prompt
  argument). Its stderr is read by a person: logs there are plain lines, at `error` unless a
  level is asked for, so what the run reports itself is not said twice; `--log-format json`
  gives the JSON lines instead.
- `defect login`, `defect logout` and `defect auth status` store, remove and show the
  credentials of the providers (`defect_cli/auth_cli.py`; `config/credentials.py`).
- `defect transcript run|record` plays or records scripted JSON-RPC sessions
  (`defect_transcript`, a client of `defect acp` over stdio that imports nothing of the
  server); it keeps stdout for its report.
- Nothing heavy is imported before it is needed: `--help`/`--version` import no SDK, and
  `defect acp` imports the ACP SDK; the provider's SDK starts loading in a background thread
  as soon as the provider is known, and runs only while the event loop sleeps
  (`defect_cli/idle_loop.py`), so it never slows `initialize` or `session/new`.
- A person gets one line, never a traceback: a TTY on stdin is told what this command is
  for (then it serves as usual), an unusable stdin or a bad log level (`--log-level`,
  `DEFECT_LOG_LEVEL`, for `acp` and `exec` alike) exits non-zero.
- A broken configuration file never stops the process: sessions it applies to fail with
  its error (file, line, reason), so the editor can show it.
- The process exits 0 when stdin closes or on SIGTERM/SIGINT, after closing its sessions:
  running turns are cancelled and committed as a cancel commits them, and their prompts are
  answered `cancelled` (`defect_acp.server.serve`); child processes are killed. A second
  signal stops without waiting for that.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import defect_transcript as transcript
from defect_cli import auth_cli
from defect_core import __version__

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from defect_core.config import Settings

HELP_EPILOG = """\
configuration: ~/.config/defect/config.toml < <repo>/.defect/config.toml
  < <repo>/.defect/config.local.toml < environment < flags (docs/configuration.md)

environment:
  DEFECT_PROVIDER     provider (scripted, anthropic, bedrock, or a [providers.NAME]);
                      default: scripted
  DEFECT_MODEL        model id
  DEFECT_SCRIPT       script file for the offline (scripted) model
  DEFECT_MAX_TOKENS, DEFECT_MAX_TURN_REQUESTS, DEFECT_RETRIES, DEFECT_REASONING_EFFORT,
  DEFECT_READ_TIMEOUT  override the configuration keys of those names
  ANTHROPIC_API_KEY   the Anthropic key (ANTHROPIC_BASE_URL: another endpoint);
                      it beats the one `defect login` stored
  AWS_PROFILE, AWS_REGION, AWS_ACCESS_KEY_ID...  Bedrock credentials (the boto3 chain)
  DEFECT_LOG_LEVEL    debug, info, warning (default), error — logs go to stderr
  DEFECT_LOG_FILE     also append logs to this file
  DEFECT_TERMINAL_SHELL  the shell of commands run in the editor's terminal
                      (terminal_shell; default: /bin/sh)
  DEFECT_STATE_DIR    where sessions are saved (default: $XDG_STATE_HOME/defect,
                      i.e. ~/.local/state/defect)
"""


LOG_LEVELS = ("debug", "info", "warning", "error")

TTY_NOTICE = (
    "defect acp speaks the Agent Client Protocol (JSON-RPC) on stdin/stdout and is meant to "
    "be launched by an editor; see README.md, 'Using defect from an editor'.\n"
)


def _log_level(value: str) -> str:
    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"invalid log level {value!r}: choose one of {', '.join(LOG_LEVELS)}"
        )
    return level


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="defect",
        description="defect — a coding agent for editors, over the Agent Client Protocol.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"defect {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    acp = sub.add_parser(
        "acp",
        help="serve the Agent Client Protocol on stdin/stdout (what editors spawn)",
        description="Serve the Agent Client Protocol (JSON-RPC 2.0) on stdin/stdout.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_exec_parser(sub)
    auth_cli.add_parsers(sub)
    transcript.add_parser(sub)
    # Listed for --help only: main() hands `fake-api ...` to defect_fakeapi's own parser.
    sub.add_parser(
        "fake-api",
        help="serve the strict fake Anthropic/Bedrock API on 127.0.0.1 (tests, offline runs)",
    )
    acp.add_argument(
        "--provider", help="model provider (scripted, anthropic, bedrock, or a [providers.NAME])"
    )
    acp.add_argument("--model", help="model id for the provider")
    acp.add_argument("--log-level", type=_log_level, help=", ".join(LOG_LEVELS))
    acp.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="ID",
        help="the first session/new continues session ID, or the newest one for its cwd "
        "(for clients without session/load)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["fake-api"]:
        from defect_fakeapi.cli import main as fake_api_main  # never on the `acp` path

        return fake_api_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "acp":
        return run_acp(args)
    if args.command == "exec":
        return run_exec(args)
    if args.command in auth_cli.COMMANDS:
        return auth_cli.run(args)
    if args.command == "transcript":
        # Not through _claim_stdout(): the results (and the recorder's proxy) use stdout.
        return transcript.main(args)
    parser.print_help()
    return 0


def _add_exec_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "exec",
        help="run one prompt (or a goal) here without an editor: for CI and scripts",
        description="Run one turn (or a goal) in the current directory; the answer goes to "
        "stdout, tool activity to stderr. Exit status: 0 end_turn, 1 failed, 2 usage or "
        "configuration, 3 max_turn_requests (a goal out of rounds), 4 max_tokens, 5 refusal, "
        "6 every tool call refused (nobody to approve it), 130 cancelled.",
    )
    run.add_argument(
        "prompt",
        nargs="?",
        help="the prompt; - (or no prompt and a pipe on stdin) reads it from stdin "
        "(with --goal: optional)",
    )
    run.add_argument("--goal", metavar="OBJECTIVE", help="work on your own until goal_done")
    run.add_argument(
        "--mode",
        choices=("ask", "accept-edits", "read-only", "yolo"),
        help="permission mode (default: ask; what it would ask about is refused: nobody is "
        "there to approve it)",
    )
    run.add_argument(
        "--output", "--output-format", choices=("text", "json", "stream-json"), default="text"
    )
    run.add_argument(
        "--input-format",
        choices=("text", "stream-json"),
        default="text",
        help="stream-json: the prompt and then steers, one JSON message per line on stdin "
        '({"type": "user", "message": {"role": "user", "content": "..."}}), each later one '
        "delivered at the running turn's next safe point; the run ends at end of input "
        "once the last turn has ended (docs/headless.md)",
    )
    run.add_argument(
        "--trust-project",
        action="store_true",
        help="apply this project's own settings that need trust for this run (its .mcp.json "
        "and [mcp.servers], hooks, hosts, [fetch] allow...): for CI on a repository you "
        "control; without it they are not applied and stderr lists them (docs/security.md)",
    )
    run.add_argument("--provider", help="model provider")
    run.add_argument("--model", help="a model the provider offers (else refused)")
    run.add_argument(
        "--log-level",
        type=_log_level,
        help=", ".join(LOG_LEVELS) + " (default: error, or warning with --log-format json)",
    )
    run.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="logs on stderr as plain lines among the activity (default), or as JSON lines",
    )


def run_exec(args: argparse.Namespace) -> int:
    ok, level = _checked_log_level(args.log_level)
    if not ok:
        return 2
    streamed = args.input_format == "stream-json"  # the prompt is stdin's first message
    if streamed and args.prompt == "-":
        sys.stderr.write("defect exec: with --input-format stream-json, stdin holds messages\n")
        return 2
    prompt = _exec_prompt(args.prompt, goal=bool((args.goal or "").strip()) or streamed)
    if prompt is None:
        return 2
    from defect_cli.headless import ExecRequest, claim_stdout
    from defect_cli.headless import run_exec as run
    from defect_cli.wiring import open_store
    from defect_core import log

    if args.log_format == "json":
        log.configure(level=level)
    else:
        # stderr is the activity a person reads: what the run reports itself is not logged
        # again, unless a level is asked for.
        log.configure(level=level or "error", fmt="human")
    out = claim_stdout()
    # The session's own notice says why it is not saved: the log would say it twice.
    store, problem = open_store(logged=args.log_format == "json")
    request = ExecRequest(
        prompt=prompt,
        goal=args.goal.strip() if args.goal else None,
        mode=args.mode,
        output=args.output,
        flags={"provider": args.provider},
        model=args.model,
        trust_project=args.trust_project,
        input_format=args.input_format,
    )
    return run(request, out, store, problem)


def _exec_prompt(given: str | None, *, goal: bool) -> str | None:
    """The prompt of `defect exec`: the argument; stdin for `-`, or when no argument is given
    and stdin is not a terminal (a pipe, a file), unless a goal needs no prompt. None (and
    one line on stderr) when there is none."""
    if given == "-" or (given is None and not goal and _stdin_is_input()):
        try:
            given = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"defect exec: cannot read the prompt from stdin: {exc}\n")
            return None
        if not given.strip():
            sys.stderr.write("defect exec: the prompt read from stdin is empty\n")
            return None
    if not (given or "").strip() and not goal:
        sys.stderr.write("defect exec: give a prompt (an argument, or - for stdin), or --goal\n")
        return None
    return given or ""


def _stdin_is_input() -> bool:
    """Whether stdin can be read for a prompt: open, readable, and not a terminal."""
    from defect_acp.stdin import StdinUnusable, check_stdin

    try:
        check_stdin()
    except StdinUnusable:
        return False
    return not os.isatty(0)


def _checked_log_level(flag: str | None) -> tuple[bool, str | None]:
    """(True, the log level asked for: the flag, else `DEFECT_LOG_LEVEL`, None for the
    default); (False, None), after one line on stderr, when `DEFECT_LOG_LEVEL` is not one."""
    level = flag or os.environ.get("DEFECT_LOG_LEVEL") or None
    if level is not None and level.strip().lower() not in LOG_LEVELS:
        sys.stderr.write(
            f"defect: DEFECT_LOG_LEVEL={level!r} is not a log level: "
            f"choose one of {', '.join(LOG_LEVELS)}\n"
        )
        return False, None
    return True, level.strip().lower() if level is not None else None


def run_acp(args: argparse.Namespace) -> int:
    from defect_acp.stdin import StdinUnusable, check_stdin

    ok, level = _checked_log_level(args.log_level)
    if not ok:
        return 2
    try:
        check_stdin()
    except StdinUnusable as exc:
        sys.stderr.write(f"defect: {exc}\n")
        return 1
    if os.isatty(0):
        sys.stderr.write(TTY_NOTICE)
    protocol_fd = _claim_stdout()
    from defect_acp.sdk_compat import prepare_pydantic

    prepare_pydantic()
    from defect_core import log

    log.configure(level=level)

    from defect_cli.wiring import Refused, acp_settings, refuse

    try:
        settings, settings_for = acp_settings({"provider": args.provider, "model": args.model})
    except Refused as exc:
        return refuse(exc)
    return _serve(settings, settings_for, protocol_fd, args.resume)


def _serve(
    settings: Settings,
    settings_for: Callable[[Path], Settings],
    protocol_fd: int,
    resume: str | None,
) -> int:
    import asyncio
    import signal

    from defect_acp.server import serve
    from defect_cli.acp_auth import StoredAuth
    from defect_cli.idle_loop import new_event_loop
    from defect_cli.wiring import acp_core

    async def main_task() -> None:
        core = acp_core(settings, settings_for)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal() -> None:
            # The first signal ends gracefully (running prompts answered `cancelled`, turns
            # committed); a second one does not wait for that.
            if stop.is_set() and task is not None:
                task.cancel()
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        await serve(
            core,
            protocol_fd,
            resume=resume,
            stop=stop,
            # The process's settings (the user's file, environment, flags), never a project's:
            # a repository must not choose the program the editor's terminal runs
            # (docs/security.md).
            terminal_shell=settings.terminal_shell,
            auth=StoredAuth(settings),  # authenticate / logout over `defect login`'s store
        )

    # Everything imported so far lives as long as the process: keep it out of the cyclic
    # collector's way, so a full collection (e.g. while loading a long session) stays short.
    gc.freeze()
    with (
        contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt),
        asyncio.Runner(loop_factory=new_event_loop) as runner,
    ):
        runner.run(main_task())
    return 0


def _claim_stdout() -> int:
    """Keep the real stdout for the protocol; send everything else written to fd 1 to stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol_fd


if __name__ == "__main__":
    raise SystemExit(main())
