"""What an "always" answer about a `bash` command remembers, and the commands it covers.

Owns `command_key` (a command line → the rule it is remembered under), the two kinds of rule
(`CommandRule`, `ExactCommand`), their stored form (`rule_to_json`, `rule_from_json`) and the
reading of the keys older versions stored (`legacy_rule`). The table of programs is data in
`defect_core/tools/command_table.py`; the prose for users is docs/permissions.md.

Invariant: "always" never covers more than the person saw. A remembered rule matches a later
command only when that command's own key is equal to it, and a command gets a generalising
`CommandRule` only when every word of it is plain (`command_table.PLAIN`: no quotes hiding
spaces or metacharacters, no expansion, no glob) and every argument passes its program's
`ArgRule` (no option known to run code or write files; the operands it keys are in the key).
Anything else — an unknown program, shell syntax (`;`, `&&`, `|`, redirections, `$`,
backticks, braces, newlines), an assignment in front, an excluded option — is keyed by the
exact command line, so "always" repeats exactly that command. Better to ask once too often
than to run once unasked.

A path-qualified program (`/usr/bin/git`, `../bin/ls`) is checked with the rule of its bare
name but keyed by the path as written: allowing `git status` never allows `./git status`.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from defect_core.tools.command_table import PLAIN, PROGRAMS, RISKY_WORDS, ArgRule, Program

_SHELL_SYNTAX = re.compile(r"[;&|<>`(){}$\\*?\[\]!#\x00-\x1f\x7f]")
"""Characters bash gives a meaning shlex does not see, or that join two commands: any of
them, quoted or not, makes the key the whole command."""
_PROGRAM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*|\.{0,2}/[A-Za-z0-9_./+-]+")
ARGUMENTS = "admitted"
"""The argument pattern of every `CommandRule` (stored with it): the arguments its program's
rule in `command_table` admits."""


@dataclass(frozen=True, slots=True)
class CommandRule:
    """`program` with `words` (subcommand, keyed operands) and any admitted arguments."""

    program: str
    words: tuple[str, ...] = ()

    def text(self) -> str:
        return " ".join((self.program, *self.words))


@dataclass(frozen=True, slots=True)
class ExactCommand:
    """Exactly this command line (outer whitespace aside)."""

    command: str

    def text(self) -> str:
        return self.command


CommandKey = CommandRule | ExactCommand


def command_key(command: str) -> CommandKey:
    """The rule an "always" answer about `command` is remembered under (see the module doc)."""
    exact = ExactCommand(command.strip())
    if not exact.command or _SHELL_SYNTAX.search(exact.command):
        return exact
    try:
        words = shlex.split(exact.command)
    except ValueError:
        return exact
    if not words or not all(PLAIN.fullmatch(w) for w in words):
        return exact
    program = words[0]
    spec = PROGRAMS.get(os.path.basename(program)) if _PROGRAM.fullmatch(program) else None
    if spec is None:
        return exact
    keyed = _program_words(spec, words[1:])
    return exact if keyed is None else CommandRule(program, keyed)


def _program_words(spec: Program, args: list[str]) -> tuple[str, ...] | None:
    """The words of the key after the program, or None when an argument is not admitted."""
    if spec.args is not None:
        return _admitted(spec.args, args)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] not in spec.before:
            return None
        i += 1
    if i == len(args):
        return ()
    rule = spec.subcommands.get(args[i])
    if rule is None:
        return None
    rest = _admitted(rule, args[i + 1 :])
    return None if rest is None else (args[i], *rest)


def _admitted(rule: ArgRule, args: list[str]) -> tuple[str, ...] | None:
    keyed: list[str] = []
    seen: set[str] = set()
    operands = 0
    if rule.leading_option and args and not args[0].startswith("-"):
        return None
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            if rule.operands == "key":
                keyed.append(word)
            continue
        if word.startswith("-") and word != "-":
            parsed = _option(rule, word)
            if parsed is None:
                return None
            names, takes_next = parsed
            seen |= names
            if takes_next:
                if i == len(args) or not rule.plain.fullmatch(args[i]):
                    return None
                i += 1
            continue
        if not rule.plain.fullmatch(word):
            return None
        first = rule.first_operand
        if operands == 0 and first is not None and not first.fullmatch(word):
            return None
        operands += 1
        if rule.operands == "key":
            keyed.append(word)
    if rule.require and not seen & rule.require:
        return None
    return tuple(keyed)


def _option(rule: ArgRule, word: str) -> tuple[set[str], bool] | None:
    """The option names `word` gives and whether it takes the next word as its value; None
    when `rule` does not admit it."""
    name, eq, value = word.partition("=")
    if eq and not rule.plain.fullmatch(value):
        return None
    if rule.options == "deny":
        if word.startswith("--"):
            # getopt and git accept any unambiguous prefix of a long option.
            if any(d.startswith(name) for d in rule.names) or any(w in name for w in RISKY_WORDS):
                return None
            return {name}, False
        if name in rule.names or any(f"-{c}" in rule.names for c in word[1:]):
            return None
        return {name}, False
    spelled = f"{name}=" if eq else name  # how the allow-list names this option
    if word.startswith("--"):
        return ({name}, False) if spelled in rule.names else None
    if len(name) > 2 and spelled in rule.names:
        return {name}, False  # a single-dash word (`go test -race -count=1`)
    seen: set[str] = set()
    letters = word[1:]
    for at, letter in enumerate(letters):
        flag = f"-{letter}"
        seen.add(flag)
        if flag in rule.names:
            continue
        rest = letters[at + 1 :]
        if f"{flag}#" in rule.names:
            return seen, False
        if f"{flag}=" in rule.names:
            if rest and not rule.plain.fullmatch(rest):
                return None
            return seen, not rest
        return None
    return seen, False


# --- the stored form --------------------------------------------------------------------------


def rule_to_json(key: CommandKey) -> dict[str, Any]:
    """A rule as a session stores it (`policy.PermissionRules.to_dict`, version 2)."""
    if isinstance(key, ExactCommand):
        return {"tool": "bash", "command": key.command}
    return {
        "tool": "bash",
        "program": key.program,
        "words": list(key.words),
        "arguments": ARGUMENTS,
    }


def rule_from_json(data: Any) -> CommandKey | None:
    """The rule `rule_to_json` stored, or None for anything else."""
    if not isinstance(data, dict) or data.get("tool") != "bash":
        return None
    if set(data) == {"tool", "command"} and isinstance(data["command"], str):
        return ExactCommand(data["command"]) if data["command"] else None
    if set(data) != {"tool", "program", "words", "arguments"} or data["arguments"] != ARGUMENTS:
        return None
    program, words = data["program"], data["words"]
    if not isinstance(program, str) or not isinstance(words, list) or not program:
        return None
    if not all(isinstance(w, str) for w in words):
        return None
    return CommandRule(program, tuple(words))


def legacy_rule(text: str) -> CommandRule | None:
    """The rule a key stored by an earlier version (`bash:<text>`: a program, program and
    subcommand, or a whitespace-normalised whole command) becomes, when that rule covers no
    more than the old key did: the same words, now with only admitted arguments. None when
    the old key meant more than any rule of the table grants (`/usr/bin/git` covered every
    subcommand; `tar` every mode) or was a whole command (its spacing was not kept)."""
    key = command_key(text)
    if not isinstance(key, CommandRule) or key.text() != " ".join(text.split()):
        return None
    spec = PROGRAMS[os.path.basename(key.program)]
    if spec.subcommands and not key.words:
        return None
    return key
