"""The transcript format: what a transcript file may say, parsed and checked.

Owns the vocabulary — the header keys, the step kinds and the options each takes, the pattern
operators and `$type` names, `"<any>"`/`"<absent>"`, the built-in variables and the `${…}`
syntax — the parsed form (`Transcript`: a `Header` and its `Step`s), and `load_transcript`/
`parse_transcript`, which turn a file into a `Transcript` or raise a `TranscriptError` that
names the file and the line.

Invariant: a transcript that parses can be played. Every step has exactly one kind and only
that kind's options, every pattern uses known operators, valid regexes and known types, and
every `${name}` is built in or captured by an earlier step. Nothing here spawns or runs
anything; the module imports only the standard library.

Why: a mistake in a hand-written transcript should fail at load time, pointing at its line —
not halfway through a run against a live agent, where it would look like the agent's fault.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

FORMAT_VERSION = 1
DEFAULT_TIMEOUT = 10.0
"""Seconds a waiting step may take, unless the step, the header or `--timeout` says otherwise."""

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

VARIABLE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_$-]+)*)\}")
FULL_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_$-]+)*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
        if extra := sorted(set(fake) - {"command", "args", "script", "script_file", "env"}):
            fail(f'unknown key {extra[0]!r} in "provider_fake"')
        if script is not None or script_file is not None:
            fail('"provider_fake" replaces the offline model: drop the offline script')
        fake_args = fake.get("args", [])
        if not isinstance(fake_args, list) or not all(isinstance(a, str) for a in fake_args):
            fail('"provider_fake.args" must be a list of strings (flags of `defect fake-api`)')
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
        for match in VARIABLE.finditer(value):
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
    if isinstance(pattern, dict) and is_operator(pattern):
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
                re.compile(VARIABLE.sub("x", regex))
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


def is_operator(pattern: dict[str, Any]) -> bool:
    """An object whose keys all start with `$` is an operator ($capture, $regex…), not a literal."""
    return bool(pattern) and all(isinstance(k, str) and k.startswith("$") for k in pattern)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
