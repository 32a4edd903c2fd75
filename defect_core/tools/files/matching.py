"""How an edit finds its place in a file's text: exact match first, then tolerant rules.

Owns `plan_edit` (old text → new text, or an `EditError` saying why not), `EditPlan`, and the
tolerant fallbacks `TOLERANT_RULES` (trailing whitespace, indentation, inner whitespace),
including the re-indentation of the replacement when indentation differed.

Invariants:
- Pure text in, text out: no file system, no backend, so it is tested and benchmarked alone.
- A match must be unique unless `replace_all`; an ambiguous or missing match names the lines
  (or the closest line) so the model can fix its `old_string` in one step.
- Line endings survive: a CRLF file is matched in LF space and converted back.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from defect_core.tools.base import ToolError
from defect_core.tools.files.access import is_crlf


@dataclass(frozen=True, slots=True)
class EditPlan:
    """The result of matching an edit against a file's text."""

    text: str
    count: int
    first_line: int
    """1-based line where the first replacement starts."""
    new_lines: int
    """How many lines the first replacement spans in the new text."""
    rule: str
    """"exact", or the tolerant rule that found the match."""


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    explains: str
    norm: Callable[[str], str]
    reindent: bool


TOLERANT_RULES: tuple[_Rule, ...] = (
    _Rule("trailing-whitespace", "trailing whitespace differed", str.rstrip, False),
    _Rule("indentation", "indentation differed", str.strip, True),
    _Rule("whitespace", "whitespace inside lines differed", lambda s: " ".join(s.split()), True),
)
"""Fallbacks tried in order when `old_string` is not found verbatim. Each compares whole lines
after normalising them; the first rule that matches decides (and must match uniquely)."""


class EditError(ToolError):
    """No match or an ambiguous match (the message does not name the file; the tool adds it)."""


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def plan_edit(text: str, old: str, new: str, replace_all: bool = False) -> EditPlan:
    """Apply `old` → `new` to `text`, or raise `EditError` saying why it cannot.

    Works in LF space when the file is CRLF throughout, and converts back, so line endings
    survive whatever the model sends.
    """
    crlf = is_crlf(text)
    if crlf:
        text, old, new = (s.replace("\r\n", "\n") for s in (text, old, new))
    plan = _plan_lf(text, old, new, replace_all)
    if crlf:
        plan = EditPlan(
            plan.text.replace("\n", "\r\n"),
            plan.count,
            plan.first_line,
            plan.new_lines,
            plan.rule,
        )
    return plan


def _plan_lf(text: str, old: str, new: str, replace_all: bool) -> EditPlan:
    new_span = new.count("\n") + 1
    if old == "":
        if text == "":
            return EditPlan(new, 1, 1, new_span, "exact")
        raise EditError(
            "old_string is empty but the file is not; give the text to replace, or use "
            "write_file to replace the whole file"
        )
    count = text.count(old)
    if count:
        first = text.find(old)
        if count > 1 and not replace_all:
            raise _ambiguous(count, _exact_lines(text, old))
        result = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        return EditPlan(
            result, count if replace_all else 1, _line_of(text, first), new_span, "exact"
        )

    lines = text.split("\n")
    old_lines = old.split("\n")
    new_lines = new.split("\n")
    if len(old_lines) > 1 and old_lines[-1] == "":
        old_lines.pop()
        if len(new_lines) > 1 and new_lines[-1] == "":
            new_lines.pop()
    if not any(line.strip() for line in old_lines):
        raise EditError("old_string was not found (it is only whitespace)")
    for rule in TOLERANT_RULES:
        starts = _line_matches(lines, old_lines, rule.norm)
        if not starts:
            continue
        if len(starts) > 1 and not replace_all:
            raise _ambiguous(len(starts), [s + 1 for s in starts], rule.name)
        out: list[str] = []
        pos = 0
        for start in starts:
            out.extend(lines[pos:start])
            out.extend(_reindent(old_lines, lines[start : start + len(old_lines)], new_lines, rule))
            pos = start + len(old_lines)
        out.extend(lines[pos:])
        return EditPlan("\n".join(out), len(starts), starts[0] + 1, len(new_lines), rule.name)
    raise EditError("old_string was not found" + _closest(lines, old_lines))


def _line_matches(lines: list[str], old_lines: list[str], norm: Callable[[str], str]) -> list[int]:
    """Start indexes of non-overlapping runs of `lines` equal to `old_lines` after `norm`."""
    want = [norm(line) for line in old_lines]
    n = len(want)
    first = want[0]
    starts: list[int] = []
    i = 0
    last = len(lines) - n
    while i <= last:
        if norm(lines[i]) == first and all(norm(lines[i + j]) == want[j] for j in range(1, n)):
            starts.append(i)
            i += n
        else:
            i += 1
    return starts


def _reindent(
    old_lines: list[str], found: list[str], new_lines: list[str], rule: _Rule
) -> list[str]:
    """`new_lines` shifted by the indentation the file has where the model's text had less/more."""
    if not rule.reindent:
        return new_lines
    anchor = next((j for j, line in enumerate(old_lines) if line.strip()), 0)
    had, has = _indent(old_lines[anchor]), _indent(found[anchor])
    if had == has:
        return new_lines
    return [
        has + line[len(had) :] if line.strip() and line.startswith(had) else line
        for line in new_lines
    ]


def _exact_lines(text: str, old: str) -> list[int]:
    return [_line_of(text, m.start()) for m in re.finditer(re.escape(old), text)]


def _ambiguous(count: int, lines: list[int], rule: str | None = None) -> EditError:
    where = ", ".join(str(n) for n in lines[:10]) + (", …" if len(lines) > 10 else "")
    how = f" (after ignoring differences by rule '{rule}')" if rule else ""
    return EditError(
        f"old_string matches {count} places{how}, at lines {where}; include more surrounding "
        "lines to make it unique, or set replace_all to change every occurrence"
    )


def _closest(lines: list[str], old_lines: list[str]) -> str:
    probe = next((line.strip() for line in old_lines if line.strip()), "")
    if not probe or len(lines) > 20_000:
        return ""
    stripped = [line.strip() for line in lines]
    best = difflib.get_close_matches(probe, stripped, n=1, cutoff=0.6)
    if not best:
        return "; read the file again to see its current content"
    n = stripped.index(best[0]) + 1
    return f"; the closest line is {n}: {lines[n - 1].strip()[:200]!r}"
