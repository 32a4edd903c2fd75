"""Scripted JSON-RPC transcripts: play them against a fresh `defect acp`, and record them.

Owns the transcript format — JSON lines: an optional header, then one client step or one
expectation on the agent's messages per line — `run_transcript` (spawns the agent over real
stdio in a throw-away workspace and plays the steps in order), the recorder (`record`: a proxy
between a real client and the agent that writes what passed as a replayable transcript), and
the `transcript run|record` commands (`add_parser`, `main`; also `python -m
defect_acp.transcript`).

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
- Module level imports only the standard library: `defect --help` stays fast.

Why: defect is driven by scripted JSON-RPC in CI — its own and its users'. A transcript is the
conversation written down (what the client sends, what it expects back), readable in a diff,
checked on every commit, and short enough to write by hand or capture from a real editor.

The format (see README.md for the full reference):

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

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn, Protocol, TextIO

FORMAT_VERSION = 1
DEFAULT_TIMEOUT = 10.0
"""Seconds a waiting step may take, unless the step, the header or `--timeout` says otherwise."""
LINE_LIMIT = 64 * 1024 * 1024
STDERR_TAIL_LINES = 15
SHOW_LIMIT = 700
"""Characters of a message shown in a failure report (`--verbose` shows all)."""

ANY = "<any>"
ABSENT = "<absent>"
OPERATORS = frozenset(
    {"$capture", "$regex", "$type", "$contains", "$exact", "$eq", "$any_of", "$not"}
)
TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})
IGNORE_MODES = ("updates", "none", "all")
CHUNK_KINDS = ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk")
BUILTIN_VARIABLES = frozenset(
    {
        "workspace",
        "state_dir",
        "tmp",
        "python",
        "transcript_dir",
        "provider_url",
        "last_id",
        "last",
        "request",
        "fake_script",
    }
)
STRIPPED_ENV_PREFIXES = ("DEFECT_", "ANTHROPIC_", "AWS_")
FAKE_PROVIDER_API_KEY = "sk-ant-api03-fake-provider-test-key"
"""The key `tests.support.fake_provider` accepts by default."""

STEP_OPTIONS: dict[str, frozenset[str]] = {
    "send": frozenset({"timeout"}),
    "send_raw": frozenset({"timeout"}),
    "notify": frozenset({"timeout"}),
    "expect": frozenset({"timeout", "ignore"}),
    "expect_unordered": frozenset({"timeout", "ignore"}),
    "expect_text": frozenset({"timeout", "ignore", "kind", "session"}),
    "expect_silence": frozenset({"ignore"}),
    "expect_exit": frozenset({"timeout"}),
    "expect_file": frozenset({"content", "timeout"}),
    "reply": frozenset({"timeout", "ignore", "to"}),
    "sleep": frozenset(),
    "kill": frozenset(),
    "restart": frozenset({"timeout", "offline_script"}),
    "close_stdin": frozenset(),
}
COMMON_STEP_OPTIONS = frozenset({"note"})
HEADER_KEYS = frozenset(
    {
        "transcript",
        "description",
        "timeout",
        "agent",
        "offline_script",
        "script_file",
        "provider_fake",
        "files",
        "skip",
        "requires",
    }
)

_VARIABLE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_$-]+)*)\}")
_FULL_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_$-]+)*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# =============================================================================================
# The format
# =============================================================================================


class TranscriptError(ValueError):
    """A transcript that cannot be played; names the file and the line."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Step:
    number: int
    """1-based position among the steps (comments and the header are not steps)."""
    line: int
    kind: str
    value: Any
    options: dict[str, Any]

    def where(self) -> str:
        return f"step {self.number} (line {self.line}): {self.kind}"


@dataclass(frozen=True)
class Header:
    line: int = 0
    description: str = ""
    timeout: float = DEFAULT_TIMEOUT
    agent_command: tuple[str, ...] | None = None
    agent_args: tuple[str, ...] = ()
    agent_env: dict[str, str | None] = field(default_factory=dict)
    offline_script: list[Any] | None = None
    script_file: str | None = None
    provider_fake: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)
    skip: str | None = None
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Transcript:
    path: Path
    header: Header
    steps: tuple[Step, ...]


def load_transcript(path: str | Path) -> Transcript:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TranscriptError(path, 0, f"cannot read the transcript: {exc}") from None
    return parse_transcript(text, path)


def parse_transcript(text: str, path: str | Path = "<transcript>") -> Transcript:
    """Parse and check a transcript; every problem is a `TranscriptError` with its line."""
    path = Path(path)
    header: Header | None = None
    steps: list[Step] = []
    defined = set(BUILTIN_VARIABLES)
    last_line = 0
    for number, raw in enumerate(text.splitlines(), 1):
        last_line = number
        stripped = raw.strip()
        if not stripped or stripped.startswith(("//", "#")):
            continue
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise TranscriptError(
                path, number, f"not valid JSON: {exc.msg} (column {exc.colno})"
            ) from None
        if not isinstance(obj, dict):
            raise TranscriptError(path, number, "each line must be one JSON object")
        if "transcript" in obj:
            if header is not None or steps:
                raise TranscriptError(
                    path, number, 'the header (the object with "transcript") must come first'
                )
            header = _parse_header(obj, path, number)
            continue
        steps.append(_parse_step(obj, path, number, len(steps) + 1, defined))
    header = header or Header()
    if not steps and header.skip is None:
        raise TranscriptError(path, max(last_line, 1), "the transcript has no steps")
    return Transcript(path=path, header=header, steps=tuple(steps))


def _parse_header(obj: dict[str, Any], path: Path, line: int) -> Header:
    def fail(message: str) -> NoReturn:
        raise TranscriptError(path, line, f"header: {message}")

    unknown = sorted(set(obj) - HEADER_KEYS)
    if unknown:
        fail(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(HEADER_KEYS))})")
    if obj["transcript"] != FORMAT_VERSION:
        fail(f'"transcript" must be {FORMAT_VERSION} (the format version)')
    timeout = obj.get("timeout", DEFAULT_TIMEOUT)
    if not _is_number(timeout) or timeout <= 0:
        fail('"timeout" must be a positive number of seconds')
    agent = obj.get("agent", {})
    if not isinstance(agent, dict):
        fail('"agent" must be an object: {"command": [...], "args": [...], "env": {...}}')
    if extra := sorted(set(agent) - {"command", "args", "env"}):
        fail(f'unknown key {extra[0]!r} in "agent" (known: command, args, env)')
    command = agent.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command)
    ):
        fail('"agent.command" must be a non-empty list of strings (or one command line)')
    args = agent.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        fail('"agent.args" must be a list of strings')
    env = agent.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str | None) for v in env.values()):
        fail('"agent.env" must map names to strings (or null to unset)')
    script = obj.get("offline_script")
    if script is not None and (
        not isinstance(script, list) or not all(isinstance(r, dict) for r in script)
    ):
        fail('"offline_script" must be a list of reply objects (see DEFECT_SCRIPT)')
    for where, value in (("offline_script", script), ("provider_fake", obj.get("provider_fake"))):
        try:
            _check_variables(value, set(BUILTIN_VARIABLES))
        except ValueError as exc:
            fail(f"{where}: {exc} (write $${{ for a literal ${{)")
    script_file = obj.get("script_file")
    if script_file is not None and not isinstance(script_file, str):
        fail('"script_file" must be a path (relative to the transcript)')
    if script is not None and script_file is not None:
        fail('use "offline_script" or "script_file", not both')
    fake = obj.get("provider_fake")
    if fake is not None:
        if not isinstance(fake, dict):
            fail('"provider_fake" must be an object: {"script": [...], "env": {...}}')
        if extra := sorted(set(fake) - {"command", "script", "script_file", "env"}):
            fail(f'unknown key {extra[0]!r} in "provider_fake"')
        if script is not None or script_file is not None:
            fail('"provider_fake" replaces the offline model: drop the offline script')
    files = obj.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        fail('"files" must map relative paths to their text')
    for name in files:
        if Path(name).is_absolute() or ".." in Path(name).parts:
            fail(f'"files": {name!r} must be a relative path inside the workspace')
    skip = obj.get("skip")
    if skip is not None and (not isinstance(skip, str) or not skip):
        fail('"skip" must be a reason (a non-empty string)')
    requires = obj.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        fail('"requires" must be a list of module names')
    return Header(
        line=line,
        description=str(obj.get("description", "")),
        timeout=float(timeout),
        agent_command=tuple(command) if command else None,
        agent_args=tuple(args),
        agent_env=dict(env),
        offline_script=script,
        script_file=script_file,
        provider_fake=fake,
        files=dict(files),
        skip=skip,
        requires=tuple(requires),
    )


def _parse_step(obj: dict[str, Any], path: Path, line: int, number: int, defined: set[str]) -> Step:
    def fail(message: str) -> NoReturn:
        raise TranscriptError(path, line, message)

    kinds = [k for k in obj if k in STEP_OPTIONS]
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        hint = ""
        if not kinds and set(obj) & HEADER_KEYS:
            hint = ' (a header needs "transcript": 1 and must be the first line)'
        fail(f"a step needs exactly one of: {', '.join(STEP_OPTIONS)} (found: {found}){hint}")
    kind = kinds[0]
    value = obj[kind]
    allowed = STEP_OPTIONS[kind] | COMMON_STEP_OPTIONS
    for key in obj:
        if key != kind and key not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            fail(f"unknown key {key!r} in a {kind} step (allowed: {known})")
    options = {k: v for k, v in obj.items() if k != kind}
    if "timeout" in options and (not _is_number(options["timeout"]) or options["timeout"] <= 0):
        fail('"timeout" must be a positive number of seconds')
    if "ignore" in options and options["ignore"] not in IGNORE_MODES:
        fail(f'"ignore" must be one of {", ".join(IGNORE_MODES)}')

    captures: set[str] = set()

    def check(pattern: Any, where: str) -> None:
        try:
            _check_pattern(pattern, defined, captures)
        except ValueError as exc:
            fail(f"{where}: {exc}")

    def check_values(value: Any, where: str) -> None:
        try:
            _check_variables(value, defined)
        except ValueError as exc:
            fail(f"{where}: {exc}")

    if kind in ("send", "notify"):
        if not isinstance(value, dict) or not isinstance(value.get("method"), str):
            fail(f'"{kind}" needs an object with a "method" (and usually "params")')
        if kind == "notify" and "id" in value:
            fail('a notification has no "id" (use "send" for a request)')
        check_values(value, kind)
    elif kind == "send_raw":
        if not isinstance(value, str | dict | list):
            fail('"send_raw" is a string (written as one line) or any JSON value')
        check_values(value, kind)
    elif kind == "expect":
        check(value, "expect")
    elif kind == "expect_unordered":
        if not isinstance(value, list) or not value:
            fail('"expect_unordered" needs a non-empty list of patterns')
        for i, pattern in enumerate(value):
            check(pattern, f"expect_unordered[{i}]")
    elif kind == "expect_text":
        if not isinstance(value, str | dict):
            fail('"expect_text" is the exact text, or a pattern such as {"$regex": "..."}')
        check(value, "expect_text")
        kind_option = options.get("kind", "agent_message_chunk")
        if kind_option not in CHUNK_KINDS:
            fail(f'"kind" must be one of {", ".join(CHUNK_KINDS)}')
        if "session" in options:
            check(options["session"], "session")
    elif kind in ("expect_silence", "sleep"):
        if not _is_number(value) or value < 0:
            fail(f'"{kind}" is a number of seconds')
    elif kind == "expect_exit":
        check(value, "expect_exit")
    elif kind == "expect_file":
        if not isinstance(value, str) or not value:
            fail('"expect_file" is a path (relative to the workspace)')
        check_values(value, kind)
        if "content" in options:
            check(options["content"], "content")
    elif kind == "reply":
        if not isinstance(value, dict) or len(set(value) & {"result", "error"}) != 1:
            fail('"reply" needs an object with either "result" or "error"')
        if extra := sorted(set(value) - {"result", "error"}):
            fail(f'unknown key {extra[0]!r} in "reply" (use "result" or "error")')
        if "error" in value and not (
            isinstance(value["error"], dict) and isinstance(value["error"].get("code"), int)
        ):
            fail('a "reply" error needs an integer "code" (and a "message")')
        to = options.get("to")
        if to is not None and not isinstance(to, str | dict):
            fail('"to" is a method name or a pattern on the agent\'s request')
        if isinstance(to, dict):
            check(to, "to")
        check_values(value, "reply")
    elif kind in ("kill", "restart", "close_stdin") and value is not True:
        fail(f'write {{"{kind}": true}}')
    if kind == "restart" and "offline_script" in options:
        script = options["offline_script"]
        if not isinstance(script, list) or not all(isinstance(r, dict) for r in script):
            fail('"offline_script" must be a list of reply objects (see DEFECT_SCRIPT)')
        check_values(script, "offline_script")
    defined |= captures
    return Step(number=number, line=line, kind=kind, value=value, options=options)


def _check_variables(value: Any, defined: set[str]) -> None:
    if isinstance(value, str):
        for match in _VARIABLE.finditer(value):
            name = match.group(1)
            if name is not None and name not in defined:
                known = ", ".join(sorted(defined - BUILTIN_VARIABLES)) or "none yet"
                raise ValueError(
                    f"${{{name}}} is used before anything captures it "
                    f'(captured so far: {known}; capture with {{"$capture": "{name}"}})'
                )
    elif isinstance(value, dict):
        for item in value.values():
            _check_variables(item, defined)
    elif isinstance(value, list):
        for item in value:
            _check_variables(item, defined)


def _check_pattern(pattern: Any, defined: set[str], captures: set[str]) -> None:
    if isinstance(pattern, dict) and _is_operator(pattern):
        unknown = sorted(set(pattern) - OPERATORS)
        if unknown:
            raise ValueError(
                f"unknown operator {unknown[0]!r} (known: {', '.join(sorted(OPERATORS))})"
            )
        if "$capture" in pattern:
            name = pattern["$capture"]
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError('"$capture" needs a variable name such as "sid"')
            if name in BUILTIN_VARIABLES:
                raise ValueError(f"${{{name}}} is built in and cannot be captured")
            captures.add(name)
        if "$regex" in pattern:
            regex = pattern["$regex"]
            if not isinstance(regex, str):
                raise ValueError('"$regex" needs a string')
            _check_variables(regex, defined)
            try:
                re.compile(_VARIABLE.sub("x", regex))
            except re.error as exc:
                raise ValueError(f"bad $regex {regex!r}: {exc}") from None
        if "$type" in pattern and pattern["$type"] not in TYPES:
            raise ValueError(f'"$type" must be one of {", ".join(sorted(TYPES))}')
        if "$contains" in pattern:
            contained = pattern["$contains"]
            if isinstance(contained, list):
                for item in contained:
                    _check_pattern(item, defined, captures)
            elif isinstance(contained, str):
                _check_variables(contained, defined)
            else:
                raise ValueError('"$contains" needs a list of patterns (arrays) or a string')
        if "$exact" in pattern:
            if not isinstance(pattern["$exact"], dict | list):
                raise ValueError('"$exact" needs an object or an array')
            _check_pattern(pattern["$exact"], defined, captures)
        if "$any_of" in pattern:
            options = pattern["$any_of"]
            if not isinstance(options, list) or not options:
                raise ValueError('"$any_of" needs a non-empty list of patterns')
            for item in options:
                _check_pattern(item, defined, captures)
        if "$not" in pattern:
            _check_pattern(pattern["$not"], defined, captures)
        if "$eq" in pattern:
            _check_variables(pattern["$eq"], defined)
        return
    if isinstance(pattern, dict):
        for item in pattern.values():
            _check_pattern(item, defined, captures)
    elif isinstance(pattern, list):
        for item in pattern:
            _check_pattern(item, defined, captures)
    elif isinstance(pattern, str):
        _check_variables(pattern, defined)


def _is_operator(pattern: dict[str, Any]) -> bool:
    return bool(pattern) and all(isinstance(k, str) and k.startswith("$") for k in pattern)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# =============================================================================================
# Variables and patterns
# =============================================================================================


class UnknownVariable(LookupError):
    pass


class Variables:
    """Built-ins (`${workspace}`…) and captures; `${a.b.0}` reaches into captured values."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = dict(values or {})

    def lookup(self, name: str, dotted: str = "") -> Any:
        if name not in self.values:
            raise UnknownVariable(f"${{{name}}} has no value yet")
        value = self.values[name]
        for part in [p for p in dotted.split(".") if p]:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise UnknownVariable(f"${{{name}{dotted}}}: no {part!r} in {_show(value, 120)}")
        return value

    def substitute(self, value: Any) -> Any:
        """A deep copy of `value` with `${…}` replaced (a whole-string `${x}` keeps x's type)."""
        if isinstance(value, str):
            return self.substitute_text(value)
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        return value

    def substitute_text(self, text: str, *, regex: bool = False) -> Any:
        if "$" not in text:
            return text
        whole = _FULL_VARIABLE.fullmatch(text)
        if whole and not regex:
            return self.lookup(whole.group(1), whole.group(2) or "")

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "\\$\\{" if regex else "${"
            value = self.lookup(match.group(1), match.group(2) or "")
            text = value if isinstance(value, str) else json.dumps(value)
            return re.escape(text) if regex else text

        return _VARIABLE.sub(replace, text)


@dataclass(frozen=True)
class Mismatch:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"at {self.path}: {self.reason}"


def match(
    pattern: Any,
    actual: Any,
    variables: Variables,
    captures: dict[str, Any] | None = None,
    path: str = "$",
) -> Mismatch | None:
    """None when `actual` matches `pattern`; captures go into `captures` (commit on success).

    Objects match partially (only the listed keys), arrays element by element with the same
    length, strings after `${…}` substitution, numbers numerically, booleans and null exactly;
    `"<any>"` accepts any value, `"<absent>"` requires the key to be missing, and objects whose
    keys all start with `$` are operators ($capture, $regex, $type, $contains, $exact, $eq,
    $any_of, $not).
    """
    captures = {} if captures is None else captures
    try:
        return _match(pattern, actual, variables, captures, path)
    except UnknownVariable as exc:
        return Mismatch(path, str(exc))


def _match(
    pattern: Any, actual: Any, variables: Variables, captures: dict[str, Any], path: str
) -> Mismatch | None:
    if isinstance(pattern, str):
        if pattern == ANY:
            return None
        if pattern == ABSENT:
            return Mismatch(path, f"should be absent, got {_show(actual, 200)}")
        expected = variables.substitute_text(pattern)
        if _equal(expected, actual):
            return None
        return Mismatch(path, f"expected {_show(expected, 200)}, got {_show(actual, 200)}")
    if isinstance(pattern, dict) and _is_operator(pattern):
        return _match_operators(pattern, actual, variables, captures, path)
    if isinstance(pattern, dict):
        if not isinstance(actual, dict):
            return Mismatch(path, f"expected an object, got {_show(actual, 200)}")
        for key, sub in pattern.items():
            where = f"{path}.{key}"
            if sub == ABSENT:
                if key in actual:
                    return Mismatch(where, f"should be absent, got {_show(actual[key], 200)}")
                continue
            if key not in actual:
                return Mismatch(where, "missing")
            if problem := _match(sub, actual[key], variables, captures, where):
                return problem
        return None
    if isinstance(pattern, list):
        if not isinstance(actual, list):
            return Mismatch(path, f"expected an array, got {_show(actual, 200)}")
        if len(pattern) != len(actual):
            return Mismatch(
                path, f"expected {len(pattern)} items, got {len(actual)}: {_show(actual, 300)}"
            )
        for i, (sub, item) in enumerate(zip(pattern, actual, strict=True)):
            if problem := _match(sub, item, variables, captures, f"{path}[{i}]"):
                return problem
        return None
    if _equal(pattern, actual):
        return None
    return Mismatch(path, f"expected {_show(pattern, 200)}, got {_show(actual, 200)}")


def _match_operators(
    pattern: dict[str, Any],
    actual: Any,
    variables: Variables,
    captures: dict[str, Any],
    path: str,
) -> Mismatch | None:
    if "$eq" in pattern:
        expected = variables.substitute(pattern["$eq"])
        if not _equal(expected, actual):
            return Mismatch(path, f"expected {_show(expected, 200)}, got {_show(actual, 200)}")
    if "$type" in pattern and not _has_type(actual, pattern["$type"]):
        return Mismatch(path, f"expected a {pattern['$type']}, got {_show(actual, 200)}")
    if "$regex" in pattern:
        regex = variables.substitute_text(pattern["$regex"], regex=True)
        if not isinstance(actual, str) or re.search(str(regex), actual) is None:
            return Mismatch(
                path, f"expected text matching /{pattern['$regex']}/, got {_show(actual, 200)}"
            )
    if "$contains" in pattern:
        contained = pattern["$contains"]
        if isinstance(contained, str):
            needle = variables.substitute_text(contained)
            if not isinstance(actual, str) or str(needle) not in actual:
                return Mismatch(path, f"expected text containing {needle!r}, got {_show(actual)}")
        else:
            if not isinstance(actual, list):
                return Mismatch(path, f"expected an array, got {_show(actual, 200)}")
            for sub in contained:
                if not any(
                    _match(sub, item, variables, dict(captures), path) is None for item in actual
                ):
                    return Mismatch(
                        path, f"no item matches {_show(sub, 200)} in {_show(actual, 300)}"
                    )
                for item in actual:
                    if _match(sub, item, variables, captures, path) is None:
                        break
    if "$exact" in pattern:
        exact = pattern["$exact"]
        if isinstance(exact, dict):
            if not isinstance(actual, dict):
                return Mismatch(path, f"expected an object, got {_show(actual, 200)}")
            extra = sorted(set(actual) - set(exact))
            if extra:
                return Mismatch(f"{path}.{extra[0]}", "unexpected key (the pattern is $exact)")
        if problem := _match(exact, actual, variables, captures, path):
            return problem
    if "$any_of" in pattern:
        problems = []
        for sub in pattern["$any_of"]:
            trial = dict(captures)
            problem = _match(sub, actual, variables, trial, path)
            if problem is None:
                captures.update(trial)
                break
            problems.append(problem.reason)
        else:
            return Mismatch(path, "none of $any_of matches: " + "; ".join(problems))
    if "$not" in pattern and _match(pattern["$not"], actual, variables, {}, path) is None:
        return Mismatch(path, f"should not match {_show(pattern['$not'], 200)}")
    if "$capture" in pattern:
        captures[pattern["$capture"]] = actual
    return None


def _has_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "object":
        return isinstance(value, dict)
    return isinstance(value, list)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def closeness(pattern: Any, actual: Any, variables: Variables) -> int:
    """How many of the pattern's leaves `actual` satisfies: ranks the 'closest' messages."""
    if isinstance(pattern, dict) and not _is_operator(pattern):
        if not isinstance(actual, dict):
            return 0
        return sum(
            1 + closeness(sub, actual[key], variables)
            for key, sub in pattern.items()
            if key in actual
        )
    if isinstance(pattern, list) and isinstance(actual, list):
        return sum(closeness(p, a, variables) for p, a in zip(pattern, actual, strict=False))
    return 1 if match(pattern, actual, variables) is None else 0


def _show(value: Any, limit: int | None = SHOW_LIMIT) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


# =============================================================================================
# The agent process
# =============================================================================================


@dataclass(frozen=True)
class Incoming:
    """One line the agent wrote; `message` is None when the line was not a JSON object."""

    index: int
    raw: str
    message: dict[str, Any] | None
    at: float


MessageObserver = Callable[[dict[str, Any], "str | None"], None]
"""Called with each agent message and, for a response, the method it answers (may raise)."""


class AgentProcess:
    """A spawned agent in its own process group, its stdout read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process, generation: int) -> None:
        self.proc = proc
        self.generation = generation
        self.messages: list[Incoming] = []
        self.arrived = asyncio.Event()
        self.eof = False
        self.killed = False
        self.observer: Callable[[dict[str, Any]], None] | None = None
        self._reader = asyncio.create_task(self._read(), name="transcript-agent-reader")

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        started = time.monotonic()
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:
                    line = b'"(a line longer than the reader\'s limit)"\n'
                if not line:
                    break
                raw = line.decode("utf-8", errors="replace").rstrip("\r\n")
                try:
                    parsed = json.loads(raw)
                except json.JSONDecodeError:
                    parsed = None
                message = parsed if isinstance(parsed, dict) else None
                self.messages.append(
                    Incoming(len(self.messages), raw, message, time.monotonic() - started)
                )
                if message is not None and self.observer is not None:
                    self.observer(message)
                self.arrived.set()
        finally:
            self.eof = True
            self.arrived.set()

    async def write(self, data: bytes, seconds: float) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            raise StepFailed("the agent's stdin is closed (after close_stdin or kill)")
        try:
            stdin.write(data)
            await asyncio.wait_for(stdin.drain(), seconds)
        except (BrokenPipeError, ConnectionResetError):
            raise StepFailed(
                f"the agent is gone (exit code {self.proc.returncode}); cannot write to it"
            ) from None
        except TimeoutError:
            raise StepFailed(f"the agent did not read its stdin within {seconds:g} s") from None

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    def kill_group(self) -> None:
        """SIGKILL the agent and everything in its process group."""
        self.killed = True
        _kill_group(self.proc)

    async def wait_exit(self, seconds: float) -> int | None:
        try:
            return await asyncio.wait_for(self.proc.wait(), seconds)
        except TimeoutError:
            return None

    async def stop(self, *, graceful: bool) -> None:
        """End the agent: close stdin and wait a little when `graceful`, then kill the group."""
        if graceful and self.proc.returncode is None:
            self.close_stdin()
            await self.wait_exit(3.0)
        self.kill_group()
        await self.wait_exit(5.0)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the process group `proc` leads (it was started with `start_new_session`).

    Only `killpg`: `proc.kill()` would poll the child first, reaping it behind asyncio's child
    watcher, which then reports exit code 255 instead of -9."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# =============================================================================================
# Running
# =============================================================================================


class StepFailed(Exception):
    """A step did not hold; carries what the failure report shows."""

    def __init__(
        self,
        problem: str,
        *,
        expected: Any = None,
        candidates: Sequence[tuple[Incoming, Mismatch | None]] = (),
        skipped: int = 0,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.expected = expected
        self.candidates = list(candidates)
        self.skipped = skipped


class _Timeout(Exception):
    pass


@dataclass
class RunOptions:
    timeout: float | None = None
    """Overrides the header's default step timeout (not a step's own `timeout`)."""
    verbose: bool = False
    keep: bool = False
    """Keep the temporary workspace (its path is printed)."""
    out: TextIO | None = None
    """Where reports go (default: stdout)."""
    on_message: MessageObserver | None = None


@dataclass
class Outcome:
    path: Path
    status: Literal["passed", "failed", "skipped"]
    detail: str = ""
    steps_run: int = 0
    seconds: float = 0.0
    agent_pids: list[int] = field(default_factory=list)
    workspace: Path | None = None


class _Run:
    """One play of one transcript."""

    def __init__(self, transcript: Transcript, options: RunOptions, out: TextIO) -> None:
        self.t = transcript
        self.options = options
        self.out = out
        self.default_timeout = options.timeout or transcript.header.timeout
        self.root = Path(tempfile.mkdtemp(prefix="defect-transcript-")).resolve()
        self.workspace = self.root / "workspace"
        self.state_dir = self.root / "state"
        self.stderr_path = self.root / "agent-stderr.log"
        self.vars = Variables(
            {
                "workspace": str(self.workspace),
                "state_dir": str(self.state_dir),
                "tmp": str(self.root),
                "python": sys.executable,
                "transcript_dir": str(transcript.path.resolve().parent),
            }
        )
        self.agent: AgentProcess | None = None
        self.generation = 0
        self.cursor = 0
        self.pending: list[dict[str, Any]] = []
        self.next_id = 1
        self.sent_methods: dict[Any, str] = {}
        self.violations: list[str] = []
        self.pids: list[int] = []
        self.env: dict[str, str] = {}
        self.command: list[str] = []
        self.fake: asyncio.subprocess.Process | None = None
        self.steps_run = 0
        self.current: Step | None = None
        """The step being played (None during set-up and after the last step)."""

    # --- set-up -------------------------------------------------------------------------------

    async def setup(self) -> None:
        header = self.t.header
        self.workspace.mkdir()
        self.state_dir.mkdir()
        for name, content in header.files.items():
            target = self.workspace / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(str(self.vars.substitute(content)), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_ENV_PREFIXES)}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_repo_root()), env.get("PYTHONPATH", "")) if p
        )
        env["DEFECT_STATE_DIR"] = str(self.state_dir)
        env["DEFECT_LOG_LEVEL"] = "info"
        provider: dict[str, str | None] = {"DEFECT_PROVIDER": "scripted"}
        if header.offline_script is not None:
            script = self.root / "offline-script.json"
            replies = self.vars.substitute(header.offline_script)
            script.write_text(json.dumps(replies), encoding="utf-8")
            provider["DEFECT_SCRIPT"] = str(script)
        elif header.script_file is not None:
            provider["DEFECT_SCRIPT"] = str(self._relative(header.script_file))
        elif header.provider_fake is not None:
            url = await self._start_fake(header.provider_fake)
            self.vars.values["provider_url"] = url
            provider = {
                "DEFECT_PROVIDER": "anthropic",
                "ANTHROPIC_BASE_URL": url,
                "ANTHROPIC_API_KEY": FAKE_PROVIDER_API_KEY,
            }
            fake_env = header.provider_fake.get("env", {})
            if not isinstance(fake_env, dict):
                raise StepFailed('"provider_fake.env" must be an object')
            provider.update({k: self._env_value(v) for k, v in fake_env.items()})
        overlay = {**provider, **{k: self._env_value(v) for k, v in header.agent_env.items()}}
        for key, value in overlay.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        self.env = env
        base = (
            [str(self.vars.substitute(c)) for c in header.agent_command]
            if header.agent_command
            else [sys.executable, "-m", "defect_acp", "acp"]
        )
        self.command = base + [str(self.vars.substitute(a)) for a in header.agent_args]
        await self.spawn()

    def _env_value(self, value: Any) -> str | None:
        return None if value is None else str(self.vars.substitute(value))

    def _relative(self, name: str) -> Path:
        path = Path(str(self.vars.substitute(name)))
        return path if path.is_absolute() else self.t.path.resolve().parent / path

    async def _start_fake(self, spec: dict[str, Any]) -> str:
        script_path = self.root / "provider-script.json"
        if "script_file" in spec:
            script_path = self._relative(str(spec["script_file"]))
        else:
            replies = self.vars.substitute(spec.get("script", []))
            script_path.write_text(json.dumps(replies), encoding="utf-8")
        self.vars.values["fake_script"] = str(script_path)
        command = spec.get("command") or [
            sys.executable,
            "-m",
            "tests.support.fake_provider",
            "--port",
            "0",
            "--script",
            "${fake_script}",
        ]
        if isinstance(command, str):
            command = shlex.split(command)
        argv = [str(self.vars.substitute(c)) for c in command]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_repo_root()), os.getcwd(), env.get("PYTHONPATH", "")) if p
        )
        with (self.root / "provider-fake-stderr.log").open("ab") as stderr:
            self.fake = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=env,
                cwd=str(_repo_root()),
                start_new_session=True,
            )
        assert self.fake.stdout is not None
        try:
            line = await asyncio.wait_for(self.fake.stdout.readline(), self.default_timeout)
        except TimeoutError:
            raise StepFailed(
                f"the provider fake ({shlex.join(argv)}) printed no URL within "
                f"{self.default_timeout:g} s"
            ) from None
        url = line.decode(errors="replace").strip()
        if not url.startswith("http"):
            tail = _tail(self.root / "provider-fake-stderr.log")
            raise StepFailed(
                f"the provider fake ({shlex.join(argv)}) printed {url!r}, not a URL\n{tail}"
            )
        return url

    async def spawn(self) -> None:
        self.generation += 1
        with self.stderr_path.open("ab") as stderr:
            if self.generation > 1:
                stderr.write(f"--- agent restarted (generation {self.generation}) ---\n".encode())
                stderr.flush()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self.command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    cwd=str(self.workspace),
                    env=self.env,
                    start_new_session=True,
                    limit=LINE_LIMIT,
                )
            except OSError as exc:
                raise StepFailed(
                    f"cannot start the agent {shlex.join(self.command)}: {exc}"
                ) from None
        self.pids.append(proc.pid)
        self.agent = AgentProcess(proc, self.generation)
        self.agent.observer = self._observe
        self.cursor = 0
        self.pending = []
        if self.options.verbose:
            self._say(f"  · agent started: {shlex.join(self.command)} (pid {proc.pid})")

    def _observe(self, message: dict[str, Any]) -> None:
        if self.options.on_message is None:
            return
        answered = None
        if "method" not in message and "id" in message:
            answered = self.sent_methods.get(_id_key(message.get("id")))
        try:
            self.options.on_message(message, answered)
        except Exception as exc:
            self.violations.append(f"{_show(message, 300)}\n    {exc}")

    async def teardown(self, *, graceful: bool) -> None:
        if self.agent is not None:
            await self.agent.stop(graceful=graceful)
        if self.fake is not None:
            _kill_group(self.fake)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.fake.wait(), 5)

    def kill_everything(self) -> None:
        """SIGKILL every process group this run started (idempotent, synchronous)."""
        if self.agent is not None:
            self.agent.kill_group()
        if self.fake is not None:
            _kill_group(self.fake)

    def cleanup_files(self) -> None:
        if not self.options.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- playing --------------------------------------------------------------------------

    async def play(self) -> None:
        for step in self.t.steps:
            self.current = step
            if self.options.verbose:
                note = f" — {step.options['note']}" if "note" in step.options else ""
                self._say(f"  → {step.where()}{note}")
            try:
                await getattr(self, f"_step_{step.kind}")(step)
            except UnknownVariable as exc:
                raise StepFailed(str(exc)) from None
            self.steps_run = step.number
            self.check_violations()
        self.current = None

    def check_violations(self) -> None:
        if self.violations:
            raise StepFailed(
                "the agent wrote a message its observer rejects:\n  " + self.violations[0]
            )

    def _timeout(self, step: Step) -> float:
        return float(step.options.get("timeout", self.default_timeout))

    def _live_agent(self) -> AgentProcess:
        if self.agent is None:
            raise StepFailed("no agent is running")
        return self.agent

    async def _next(self, deadline: float) -> Incoming | None:
        agent = self._live_agent()
        loop = asyncio.get_running_loop()
        while self.cursor >= len(agent.messages):
            if agent.eof:
                return None
            agent.arrived.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _Timeout
            try:
                await asyncio.wait_for(agent.arrived.wait(), remaining)
            except TimeoutError:
                raise _Timeout from None
        item = agent.messages[self.cursor]
        self.cursor += 1
        if self.options.verbose:
            self._say(f"    ← {_show(item.message if item.message is not None else item.raw)}")
        return item

    async def _wait_for(
        self,
        step: Step,
        accept: Callable[[dict[str, Any]], bool],
        describe: Any,
        rank: Callable[[dict[str, Any]], int],
        explain: Callable[[dict[str, Any]], Mismatch | None],
        *,
        ignore_default: str = "updates",
    ) -> dict[str, Any]:
        """Consume agent messages until `accept` takes one; skip what `ignore` allows."""
        ignore = step.options.get("ignore", ignore_default)
        timeout = self._timeout(step)
        deadline = asyncio.get_running_loop().time() + timeout
        seen: list[Incoming] = []

        def failure(problem: str, extra: Incoming | None = None) -> StepFailed:
            pool = [i for i in seen if i.message is not None]
            ranked = sorted(pool, key=lambda i: rank(i.message or {}), reverse=True)[:2]
            if extra is not None:
                ranked = [extra, *[i for i in ranked if i is not extra][:1]]
            candidates = [(i, explain(i.message) if i.message else None) for i in ranked]
            return StepFailed(problem, expected=describe, candidates=candidates, skipped=len(seen))

        while True:
            try:
                item = await self._next(deadline)
            except _Timeout:
                raise failure(
                    f"timed out after {timeout:g} s waiting for a matching message"
                ) from None
            if item is None:
                code = await self._live_agent().wait_exit(2.0)
                raise failure(f"the agent closed its output (exit code {code}) before a match")
            message = item.message
            if message is None:
                raise failure(f"the agent wrote a line that is not a JSON object: {item.raw!r}")
            if accept(message):
                return message
            if _skippable(message, ignore):
                self._remember_request(message)
                seen.append(item)
                continue
            seen.append(item)
            raise failure(_unexpected(message, ignore), extra=item)

    def _remember_request(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            self.pending.append(message)

    async def _step_send(self, step: Step) -> None:
        value = self.vars.substitute(step.value)
        message: dict[str, Any] = {"jsonrpc": "2.0"}
        if "id" not in value:
            message["id"] = self.next_id
            self.next_id += 1
        message.update(value)
        self.sent_methods[_id_key(message.get("id"))] = message["method"]
        self.vars.values["last_id"] = message.get("id")
        await self._write(message, step)

    async def _step_notify(self, step: Step) -> None:
        await self._write({"jsonrpc": "2.0", **self.vars.substitute(step.value)}, step)

    async def _step_send_raw(self, step: Step) -> None:
        value = self.vars.substitute(step.value)
        text = value if isinstance(value, str) else json.dumps(value)
        await self._live_agent().write((text.rstrip("\n") + "\n").encode(), self._timeout(step))

    async def _write(self, message: dict[str, Any], step: Step) -> None:
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode()
        await self._live_agent().write(data, self._timeout(step))

    async def _step_expect(self, step: Step) -> None:
        captures: dict[str, Any] = {}

        def accept(message: dict[str, Any]) -> bool:
            captures.clear()
            return match(step.value, message, self.vars, captures) is None

        message = await self._wait_for(
            step,
            accept,
            step.value,
            lambda m: closeness(step.value, m, self.vars),
            lambda m: match(step.value, m, self.vars),
        )
        self._matched(message, captures)

    def _matched(self, message: dict[str, Any], captures: dict[str, Any]) -> None:
        self.vars.values.update(captures)
        self.vars.values["last"] = message
        self._remember_request(message)

    async def _step_expect_unordered(self, step: Step) -> None:
        remaining = list(step.value)
        while remaining:
            found = self._unordered_accept(remaining)

            def rank(message: dict[str, Any]) -> int:
                return max(closeness(p, message, self.vars) for p in remaining)

            def explain(message: dict[str, Any]) -> Mismatch | None:
                best = max(remaining, key=lambda p: closeness(p, message, self.vars))
                return match(best, message, self.vars)

            message = await self._wait_for(step, found.accept, remaining, rank, explain)
            assert found.hit is not None
            index, captures = found.hit
            remaining.pop(index)
            self._matched(message, captures)

    def _unordered_accept(self, remaining: list[Any]) -> _FirstMatch:
        return _FirstMatch(remaining, self.vars)

    async def _step_expect_text(self, step: Step) -> None:
        kind = step.options.get("kind", "agent_message_chunk")
        session = step.options.get("session")
        expected = step.value
        exact = self.vars.substitute_text(expected) if isinstance(expected, str) else None
        text = ""
        state = {"diverged": False}

        def is_chunk(message: dict[str, Any]) -> bool:
            if message.get("method") != "session/update" or "id" in message:
                return False
            params = message.get("params") or {}
            update = params.get("update") or {}
            if update.get("sessionUpdate") != kind:
                return False
            return session is None or match(session, params.get("sessionId"), self.vars) is None

        def accept(message: dict[str, Any]) -> bool:
            nonlocal text
            if not is_chunk(message):
                return False
            content = message["params"]["update"].get("content") or {}
            text += str(content.get("text", "")) if content.get("type") == "text" else ""
            if exact is not None:
                if text == exact:
                    return True
                if not str(exact).startswith(text):
                    state["diverged"] = True
                    return True
                return False
            return match(expected, text, self.vars) is None

        describe = {"streamed text": expected, "kind": kind}
        try:
            await self._wait_for(step, accept, describe, lambda m: 0, lambda m: None)
        except StepFailed as failed:
            failed.problem += f"\n  streamed so far: {text!r}"
            raise
        if state["diverged"]:
            common = os.path.commonprefix([str(exact), text])  # noqa: RUF071
            raise StepFailed(
                "the streamed text differs from the expected text\n"
                f"  streamed: {text!r}\n"
                f"  they part after {len(common)} characters: …{common[-40:]!r}",
                expected=describe,
            )

    async def _step_expect_silence(self, step: Step) -> None:
        ignore = step.options.get("ignore", "none")
        deadline = asyncio.get_running_loop().time() + float(step.value)
        while True:
            try:
                item = await self._next(deadline)
            except _Timeout:
                return
            if item is None:
                return
            if item.message is not None and _skippable(item.message, ignore):
                continue
            raise StepFailed(
                f"expected no message for {float(step.value):g} s, but the agent wrote one",
                candidates=[(item, None)],
            )

    async def _step_reply(self, step: Step) -> None:
        to = step.options.get("to")

        def wanted(message: dict[str, Any]) -> bool:
            if "method" not in message or "id" not in message:
                return False
            if to is None:
                return True
            if isinstance(to, str):
                return bool(message["method"] == to)
            return match(to, message, self.vars) is None

        request = next((m for m in reversed(self.pending) if wanted(m)), None)
        if request is None:
            pattern = {"method": to} if isinstance(to, str) else (to or {"method": ANY})
            request = await self._wait_for(
                step,
                wanted,
                {"an agent request": pattern},
                lambda m: closeness(pattern, m, self.vars),
                lambda m: match(pattern, m, self.vars),
            )
        else:
            self.pending.remove(request)
        self.vars.values["request"] = request
        answer = self.vars.substitute(step.value)
        await self._write({"jsonrpc": "2.0", "id": request["id"], **answer}, step)

    async def _step_sleep(self, step: Step) -> None:
        await asyncio.sleep(float(step.value))

    async def _step_kill(self, step: Step) -> None:
        agent = self._live_agent()
        agent.kill_group()
        await agent.wait_exit(5.0)

    async def _step_restart(self, step: Step) -> None:
        if self.agent is not None:
            await self.agent.stop(graceful=False)
        if "offline_script" in step.options:
            script = self.root / f"offline-script-{self.generation + 1}.json"
            replies = self.vars.substitute(step.options["offline_script"])
            script.write_text(json.dumps(replies), encoding="utf-8")
            self.env["DEFECT_SCRIPT"] = str(script)
            self.env["DEFECT_PROVIDER"] = "scripted"
        await self.spawn()

    async def _step_close_stdin(self, step: Step) -> None:
        self._live_agent().close_stdin()

    async def _step_expect_exit(self, step: Step) -> None:
        agent = self._live_agent()
        timeout = self._timeout(step)
        code = await agent.wait_exit(timeout)
        if code is None:
            raise StepFailed(f"the agent did not exit within {timeout:g} s", expected=step.value)
        if problem := match(step.value, code, self.vars):
            raise StepFailed(f"the agent exited with code {code}: {problem}", expected=step.value)

    async def _step_expect_file(self, step: Step) -> None:
        """The file's text matches `content` (default: it exists; "<absent>": it does not).

        Waits up to the step's timeout for it to hold: a tool may still be finishing."""
        path = Path(str(self.vars.substitute(step.value)))
        path = path if path.is_absolute() else self.workspace / path
        pattern = step.options.get("content", ANY)
        timeout = self._timeout(step)
        deadline = time.monotonic() + timeout
        while True:
            exists = path.is_file()
            if pattern == ABSENT:
                problem = None if not exists else Mismatch(str(path), "should not exist")
            elif not exists:
                problem = Mismatch(str(path), "no such file")
            else:
                text = path.read_text(encoding="utf-8", errors="replace")
                problem = match(pattern, text, self.vars)
            if problem is None:
                return
            if time.monotonic() >= deadline:
                raise StepFailed(f"the file does not hold after {timeout:g} s: {problem}")
            await asyncio.sleep(0.05)

    def _say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


class _FirstMatch:
    """Accepts a message that matches any remaining pattern; remembers which one."""

    def __init__(self, patterns: list[Any], variables: Variables) -> None:
        self.patterns = patterns
        self.variables = variables
        self.hit: tuple[int, dict[str, Any]] | None = None

    def accept(self, message: dict[str, Any]) -> bool:
        for i, pattern in enumerate(self.patterns):
            captures: dict[str, Any] = {}
            if match(pattern, message, self.variables, captures) is None:
                self.hit = (i, captures)
                return True
        return False


def _skippable(message: dict[str, Any], ignore: str) -> bool:
    if ignore == "all":
        return True
    if ignore == "none":
        return False
    return message.get("method") == "session/update" and "id" not in message


def _unexpected(message: dict[str, Any], ignore: str) -> str:
    if "method" in message and "id" in message:
        what = f"the agent sent a {message['method']} request (answer it with a reply step)"
    elif "method" in message:
        what = f"the agent sent a {message['method']} notification"
    elif "error" in message:
        what = f"the agent answered id {message.get('id')!r} with an error"
    else:
        what = f"the agent answered id {message.get('id')!r}"
    rule = {
        "updates": "only session/update notifications are skipped while waiting",
        "none": 'this step skips nothing ("ignore": "none")',
    }.get(ignore, "")
    return f"unexpected message: {what}; {rule}"


def _id_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _missing_module(names: Iterable[str]) -> str | None:
    import importlib.util

    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return name
    return None


async def run_transcript(path: str | Path, options: RunOptions | None = None) -> Outcome:
    """Play one transcript file against a fresh agent; report on `options.out`."""
    options = options or RunOptions()
    out = options.out or sys.stdout
    path = Path(path)
    started = time.monotonic()
    try:
        transcript = load_transcript(path)
    except TranscriptError as exc:
        out.write(f"FAIL {path}\n  malformed transcript: {exc}\n")
        return Outcome(path, "failed", f"malformed transcript: {exc}")
    header = transcript.header
    if header.skip is not None:
        out.write(f"SKIP {path}: {header.skip}\n")
        return Outcome(path, "skipped", header.skip)
    if missing := _missing_module(header.requires):
        reason = f"requires the module {missing}, which is not available"
        out.write(f"SKIP {path}: {reason}\n")
        return Outcome(path, "skipped", reason)

    run = _Run(transcript, options, out)
    if options.verbose:
        out.write(f"RUN  {path} (workspace {run.workspace})\n")
    failure: str | None = None
    try:
        try:
            await run.setup()
            await run.play()
        except StepFailed as failed:
            failure = _report(run, failed)
            await run.teardown(graceful=False)
        except (Exception, asyncio.CancelledError) as exc:
            failure = f"FAIL {path}\n  the runner crashed: {type(exc).__name__}: {exc}"
            await run.teardown(graceful=False)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            await run.teardown(graceful=True)
            try:
                run.check_violations()
            except StepFailed as failed:
                failure = _report(run, failed)
    finally:
        run.kill_everything()  # whatever happened above (even KeyboardInterrupt)
        run.cleanup_files()
    seconds = time.monotonic() - started
    outcome = Outcome(
        path,
        "failed" if failure else "passed",
        failure or "",
        run.steps_run,
        seconds,
        list(run.pids),
        run.workspace,
    )
    if failure:
        out.write(failure + "\n")
        if options.keep:
            out.write(f"  kept: {run.root}\n")
    else:
        out.write(f"PASS {path} ({len(transcript.steps)} steps, {seconds:.1f} s)\n")
    out.flush()
    return outcome


def _report(run: _Run, failed: StepFailed) -> str:
    step = run.current
    if step is not None:
        where = step.where()
    elif run.steps_run:
        where = "after the last step"
    else:
        where = "set-up (before the first step)"
    lines = [f"FAIL {run.t.path} — {where}", f"  problem:  {failed.problem}"]
    limit = None if run.options.verbose else SHOW_LIMIT
    if failed.expected is not None:
        lines.append(f"  expected: {_show(failed.expected, limit)}")
    elif step is not None and step.kind.startswith("expect"):
        lines.append(f"  expected: {_show(step.value, limit)}")
    for n, (item, mismatch) in enumerate(failed.candidates):
        label = "actual:  " if n == 0 else "also:    "
        shown = _show(item.message, limit) if item.message is not None else repr(item.raw)
        lines.append(f"  {label} {shown}")
        if mismatch is not None:
            lines.append(f"            {mismatch}")
    if failed.skipped:
        lines.append(f"  messages consumed while waiting: {failed.skipped}")
    if not failed.candidates and failed.problem.startswith("timed out"):
        lines.append("  actual:   (no message)")
    tail = _tail(run.stderr_path)
    if tail:
        lines.append(f"  agent stderr (last {STDERR_TAIL_LINES} lines):")
        lines.extend(f"    | {line}" for line in tail.splitlines())
    return "\n".join(lines)


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory stands for its `*.jsonl` files, sorted."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        else:
            found.append(path)
    return found


async def run_files(paths: Iterable[str | Path], options: RunOptions | None = None) -> int:
    """Play every transcript; exit status 0 when none failed (skips are fine), else 1."""
    options = options or RunOptions()
    out = options.out or sys.stdout
    files = expand_paths(paths)
    if not files:
        out.write("no transcripts given\n")
        return 1
    outcomes = [await run_transcript(path, options) for path in files]
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("passed", "failed", "skipped")}
    out.write(
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped\n"
    )
    out.flush()
    return 1 if counts["failed"] else 0


# =============================================================================================
# Recording
# =============================================================================================


class _LineSource(Protocol):
    async def readline(self) -> bytes: ...


class _LineSink(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


class _ThreadLines:
    """Lines from a blocking file (stdin when it is a regular file or a terminal)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def readline(self) -> bytes:
        line: bytes = await asyncio.to_thread(self._stream.readline)
        return line


class _FdSink:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(_write_all, self._fd, data)

    async def close(self) -> None:
        return None


class _StreamSink:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _stdin_source() -> _LineSource:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    try:
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", closefd=False)
        )
    except (ValueError, OSError):
        return _ThreadLines(sys.stdin.buffer)
    return reader


@dataclass(frozen=True)
class Recorded:
    """One thing the proxy saw: a line from `client` or `agent`, or `client_eof`/`exit`."""

    source: Literal["client", "agent", "client_eof", "exit"]
    raw: bytes = b""
    code: int | None = None


async def record(
    agent_command: Sequence[str],
    out: Path,
    *,
    client_command: Sequence[str] | None = None,
    log: TextIO | None = None,
) -> int:
    """Sit between a client (our stdin/stdout, or `client_command`) and the agent; write what
    passed to `out` as a transcript. Returns 0 once the transcript is written."""
    log = log or sys.stderr
    events: list[Recorded] = []
    agent = await asyncio.create_subprocess_exec(
        *agent_command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,
        limit=LINE_LIMIT,
        start_new_session=True,
    )
    client: asyncio.subprocess.Process | None = None
    source: _LineSource
    sink: _LineSink
    if client_command:
        client = await asyncio.create_subprocess_exec(
            *client_command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,
            limit=LINE_LIMIT,
        )
        assert client.stdout is not None and client.stdin is not None
        source, sink = client.stdout, _StreamSink(client.stdin)
    else:
        source, sink = await _stdin_source(), _FdSink(1)
    assert agent.stdin is not None and agent.stdout is not None
    agent_in, agent_out = agent.stdin, agent.stdout

    async def from_client() -> None:
        while line := await source.readline():
            events.append(Recorded("client", line))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                agent_in.write(line if line.endswith(b"\n") else line + b"\n")
                await agent_in.drain()
        events.append(Recorded("client_eof"))
        with contextlib.suppress(Exception):
            agent_in.close()

    async def from_agent() -> None:
        while line := await agent_out.readline():
            events.append(Recorded("agent", line))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await sink.write(line)
        events.append(Recorded("exit", code=await agent.wait()))
        await sink.close()

    client_task = asyncio.create_task(from_client())
    agent_task = asyncio.create_task(from_agent())
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            if main is not None:
                loop.add_signal_handler(signum, main.cancel)
    try:
        await agent_task
        if client is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.wait(), 5)
    except asyncio.CancelledError:
        log.write("defect transcript record: interrupted; writing what was recorded\n")
    finally:
        client_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await client_task
        _kill_group(agent)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(agent.wait(), 5)
        if client is not None and client.returncode is None:
            client.kill()
            await client.wait()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
        lines = to_transcript(events, agent_command, env=dict(os.environ))
        await asyncio.to_thread(out.write_text, "\n".join(lines) + "\n", encoding="utf-8")
        log.write(f"defect transcript record: wrote {out} ({len(lines)} lines)\n")
    return 0


_ISO_TIME = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"
TIME_KEYS = frozenset({"updatedAt", "createdAt", "timestamp", "time", "startedAt", "endedAt"})
CAPTURE_KEYS = {"sessionId": "sid", "toolCallId": "tool"}
RECORDED_ENV_SKIP = frozenset({"DEFECT_SCRIPT", "DEFECT_STATE_DIR", "DEFECT_LOG_FILE"})


class _Normaliser:
    """Turns recorded values into patterns: what varies between runs is never literal."""

    def __init__(self, workspace: str | None) -> None:
        self.workspace = workspace.rstrip("/") if workspace else None
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def _name_for(self, prefix: str) -> str:
        n = self.counts.get(prefix, 0) + 1
        self.counts[prefix] = n
        if prefix == "sid":
            return "sid" if n == 1 else f"sid{n}"
        return f"{prefix}{n}"

    def text(self, value: str) -> Any:
        if value in (ANY, ABSENT):
            return {"$eq": value}
        if value in self.names:
            return f"${{{self.names[value]}}}"
        text = value.replace("${", "$${")
        for known, name in self.names.items():
            if len(known) >= 8 and known in text:
                text = text.replace(known, f"${{{name}}}")
        if self.workspace and self.workspace in text:
            text = text.replace(self.workspace, "${workspace}")
        return text

    def client(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.client(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.client(v) for v in value]
        return value

    def agent(self, value: Any, path: tuple[str, ...] = ()) -> Any:
        key = path[-1] if path else ""
        if isinstance(value, dict):
            if _is_operator(value):
                return {"$eq": value}
            value = {k: v for k, v in value.items() if k != "_meta"}
            if value.get("sessionUpdate") == "usage_update":
                relaxed = {"used": {"$type": "number"}, "size": {"$type": "number"}, "cost": ANY}
                return {
                    k: relaxed[k] if k in relaxed else self.agent(v, (*path, k))
                    for k, v in value.items()
                }
            return {k: self.agent(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.agent(v, path) for v in value]
        if path[-2:] == ("agentInfo", "version"):
            return {"$type": "string"}
        if key in TIME_KEYS:
            return ANY
        if isinstance(value, str):
            if key in CAPTURE_KEYS and value not in self.names:
                name = self._name_for(CAPTURE_KEYS[key])
                self.names[value] = name
                return {"$capture": name}
            if re.match(_ISO_TIME, value) and value not in self.names:
                return {"$regex": _ISO_TIME}
            return self.text(value)
        return value


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _parse_line(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _recorded_header(
    agent_command: Sequence[str], env: dict[str, str], norm: _Normaliser
) -> dict[str, Any]:
    header: dict[str, Any] = {"transcript": FORMAT_VERSION, "timeout": int(DEFAULT_TIMEOUT)}
    command = list(agent_command)
    agent: dict[str, Any] = {}
    acp_at = None
    for i, part in enumerate(command):
        if part == "acp" and (
            (i >= 2 and command[i - 2 : i] == ["-m", "defect_acp"])
            or (i >= 1 and Path(command[i - 1]).name == "defect")
        ):
            acp_at = i
            break
    if acp_at is None:
        agent["command"] = command
    elif command[acp_at + 1 :]:
        agent["args"] = command[acp_at + 1 :]
    recorded_env = {
        k: v
        for k, v in sorted(env.items())
        if k.startswith("DEFECT_") and k not in RECORDED_ENV_SKIP
    }
    if recorded_env.get("DEFECT_LOG_LEVEL"):
        recorded_env.pop("DEFECT_LOG_LEVEL")
    if recorded_env:
        agent["env"] = recorded_env
    if agent:
        header["agent"] = agent
    script = env.get("DEFECT_SCRIPT")
    if script:
        try:
            data = json.loads(Path(script).read_text(encoding="utf-8"))
            replies = data.get("replies") if isinstance(data, dict) else data
            if isinstance(replies, list):
                header["offline_script"] = norm.client(replies)
        except (OSError, json.JSONDecodeError):
            pass
    return header


def to_transcript(
    events: Sequence[Recorded], agent_command: Sequence[str], *, env: dict[str, str]
) -> list[str]:
    """The lines of a transcript that replays `events` (see `record`)."""
    workspace = None
    for event in events:
        message = _parse_line(event.raw) if event.source == "client" else None
        if message and message.get("method") in ("session/new", "session/load"):
            cwd = (message.get("params") or {}).get("cwd")
            if isinstance(cwd, str) and cwd.startswith("/"):
                workspace = cwd
                break
    norm = _Normaliser(workspace)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"// recorded by `defect transcript record` on {stamp}; agent: {shlex.join(agent_command)}",
        '// the workspace starts empty on replay: seed files with the header\'s "files"',
        json.dumps(_recorded_header(agent_command, env, norm), ensure_ascii=False),
    ]
    if env.get("DEFECT_PROVIDER") not in (None, "", "scripted", "offline"):
        lines.insert(
            1,
            f"// recorded against the {env['DEFECT_PROVIDER']} provider: a replay without keys "
            'needs an "offline_script" or a "provider_fake" in the header',
        )

    writer = _TranscriptWriter(norm, lines)
    for event in events:
        writer.add(event)
    writer.flush()
    return lines


class _TranscriptWriter:
    """Turns the proxy's events into steps, in order (see `to_transcript`)."""

    def __init__(self, norm: _Normaliser, lines: list[str]) -> None:
        self.norm = norm
        self.lines = lines
        self.client_requests: dict[str, str] = {}
        self.agent_requests: dict[str, str] = {}
        self.open_prompts: dict[str, str] = {}
        """Unanswered session/prompt: request id key → session id."""
        self.interrupted: set[str] = set()
        """Sessions whose turn the client interrupted: their updates vary with timing."""
        self.run: dict[str, Any] | None = None
        """Chunks being joined: {"session", "kind", "text"}."""

    def emit(self, step: dict[str, Any]) -> None:
        self.lines.append(json.dumps(step, ensure_ascii=False))

    def flush(self) -> None:
        if self.run is None:
            return
        step: dict[str, Any] = {"expect_text": self.norm.text(self.run["text"])}
        if self.run["kind"] != "agent_message_chunk":
            step["kind"] = self.run["kind"]
        self.emit(step)
        self.run = None

    def interrupt(self) -> None:
        """The client acted while turns were streaming: how much had streamed is timing."""
        for session in self.open_prompts.values():
            if session in self.interrupted:
                continue
            self.interrupted.add(session)
            if self.run is not None and self.run["session"] == session:
                self.emit(
                    {
                        "expect": {
                            "method": "session/update",
                            "params": {
                                "sessionId": self.norm.client(session),
                                "update": {"sessionUpdate": self.run["kind"]},
                            },
                        },
                        "note": "the turn was streaming (how much had streamed varies)",
                    }
                )
                self.run = None
            self.lines.append(
                "// the client acted mid-turn: this turn's further updates vary with timing "
                "and are not recorded"
            )
        self.flush()

    def add(self, event: Recorded) -> None:
        if event.source == "client_eof":
            self.flush()
            self.emit({"close_stdin": True})
            return
        if event.source == "exit":
            self.flush()
            self.emit({"expect_exit": event.code})
            return
        message = _parse_line(event.raw)
        text = event.raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if event.source == "client":
            self.from_client(message, text)
        elif message is None:
            self.flush()
            self.lines.append(f"// the agent wrote a line that is not JSON: {text[:200]!r}")
        else:
            self.from_agent(message)

    def from_client(self, message: dict[str, Any] | None, text: str) -> None:
        norm = self.norm
        if message is None:
            self.flush()
            self.emit({"send_raw": norm.text(text)})
            return
        method = message.get("method")
        body = {k: v for k, v in message.items() if k != "jsonrpc"}
        if method is None and "id" in message:
            # an answer to the agent's request: the agent was waiting, its stream is complete
            self.flush()
            answered = self.agent_requests.pop(_id_key(message.get("id")), None)
            step: dict[str, Any] = {
                "reply": {k: norm.client(v) for k, v in body.items() if k in ("result", "error")}
            }
            if answered:
                step["to"] = answered
            self.emit(step)
            return
        self.interrupt()
        if "id" in message:
            key = _id_key(message["id"])
            self.client_requests[key] = str(method)
            if method == "session/prompt":
                self.open_prompts[key] = str(_object(message.get("params")).get("sessionId"))
            self.emit({"send": norm.client(body)})
        else:
            self.emit({"notify": norm.client(body)})

    def from_agent(self, message: dict[str, Any]) -> None:
        norm = self.norm
        params = _object(message.get("params"))
        update = _object(params.get("update"))
        session = str(params.get("sessionId"))
        if message.get("method") == "session/update" and "id" not in message:
            if session in self.interrupted:
                return
            kind = update.get("sessionUpdate")
            if kind in CHUNK_KINDS:
                content = _object(update.get("content"))
                piece = str(content.get("text", "")) if content.get("type") == "text" else ""
                if self.run is not None and (self.run["session"], self.run["kind"]) != (
                    session,
                    kind,
                ):
                    self.flush()
                if self.run is None:
                    self.run = {"session": session, "kind": kind, "text": ""}
                self.run["text"] += piece
                return
        self.flush()
        if "method" not in message:
            key = _id_key(message.get("id"))
            if self.client_requests.pop(key, None) == "session/prompt":
                self.interrupted.discard(self.open_prompts.pop(key, ""))
            expect: dict[str, Any] = {"id": message.get("id")}
            if "error" in message:
                code = _object(message["error"]).get("code")
                expect["error"] = {"code": code, "message": {"$type": "string"}}
            else:
                expect["result"] = norm.agent(message.get("result"), ("result",))
            self.emit({"expect": expect})
            return
        expect = {"method": message["method"]}
        if "params" in message:
            expect["params"] = norm.agent(message["params"], ("params",))
        if "id" in message:
            self.agent_requests[_id_key(message["id"])] = str(message["method"])
        self.emit({"expect": expect})


# =============================================================================================
# Commands
# =============================================================================================

RUN_DESCRIPTION = """\
Play transcript files (JSON lines: client steps and expectations on the agent's messages)
against a freshly spawned `defect acp` over real stdio, each in its own temporary workspace
and state directory. A directory stands for its *.jsonl files. Exit status 0 when none
failed, 1 otherwise. The format is documented in README.md ("Transcripts")."""

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
            agent = [sys.executable, "-m", "defect_acp", "acp"]
        client = shlex.split(args.client) if args.client else None
        return asyncio.run(record(agent, args.out, client_command=client))
    parser = getattr(args, "transcript_parser", None)
    if parser is not None:
        parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
