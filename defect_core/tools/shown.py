"""Untrusted text as a person is shown it: every character accounted for, nothing hidden.

Owns `visible` (a command, a path or an argument made visible, on one line for a title or as
a block for a permission question's content), `clip_title` (a tool call's title: one line,
clipped with a mark that says so), and `fenced` (a Markdown code block no text can close
early).

Invariant: what leaves here shows every character of its input or says what stands in its
place — a title that is clipped ends with `…` (and, when the caller shows the whole text
elsewhere, says where); whitespace and invisible characters become markers, never silence.
Why: a model that is prompt-injected chooses the command or path a permission question is
about. `git status` followed by 250 spaces (or 200 line breaks) and `&& touch M` used to be
shown as `git status      …`, and "allow once" ran the hidden part.

The markers (docs/permissions.md lists them):
- a line break is `␤` on one line (a title); in a block it stays a line break, and a run of
  three or more becomes `⟨N line breaks⟩` followed by one;
- a carriage return is `␍`, a tab `⇥`;
- a run of more than `MAX_SPACES` spaces is `⟨N spaces⟩`; a long run of mixed whitespace is
  `⟨N line breaks, M spaces, …⟩`;
- any other control, format (bidirectional overrides, zero-width characters), separator or
  unassigned character is `⟨U+XXXX⟩`.

A literal `␤` or `⟨…⟩` in the input is shown as itself: it can only make the text look
longer than it is, never hide any of it.
"""

from __future__ import annotations

import re
import unicodedata

MAX_SPACES = 8
"""Longer runs of spaces are shown as a count: 8 keeps ordinary indentation as it is."""

_WHITESPACE_RUN = re.compile(r"[ \t\r\n\f\v]+")
_SIMPLE = {"\t": "⇥", "\r": "␍"}
_NAMES = (("\n", "line break"), (" ", "space"), ("\t", "tab"), ("\r", "carriage return"))


def _hidden(char: str) -> bool:
    """A character that shows as nothing, or as something else (Cc, Cf, Zl, Zp, Zs, Cn, Cs,
    Co), except the plain space."""
    if char == " ":
        return False
    return unicodedata.category(char)[0] in "CZ"


def _code(char: str) -> str:
    return f"⟨U+{ord(char):04X}⟩"


def _count(run: str) -> str:
    parts = []
    for char, name in _NAMES:
        n = run.count(char)
        if n:
            parts.append(f"{n} {name}{'s' if n != 1 else ''}")
    other = len(run) - sum(run.count(c) for c, _ in _NAMES)
    if other:
        parts.append(f"{other} other whitespace character{'s' if other != 1 else ''}")
    return "⟨" + ", ".join(parts) + "⟩"


def _run(run: str, block: bool) -> str:
    """One run of ASCII whitespace, made visible."""
    if run.count(" ") == len(run):
        return run if len(run) <= MAX_SPACES else f"⟨{len(run)} spaces⟩"
    breaks = run.count("\n")
    if len(run) <= MAX_SPACES and breaks <= 2:
        out = []
        for char in run:
            if char == "\n":
                out.append("\n" if block else "␤")
            elif char == " ":
                out.append(" ")
            else:
                out.append(_SIMPLE.get(char) or _code(char))
        return "".join(out)
    return _count(run) + ("\n" if block and breaks else "")


def visible(text: str, *, block: bool = False) -> str:
    """`text` with its whitespace and invisible characters made visible (see the module doc):
    on one line, or with `block` keeping single line breaks as line breaks."""
    out: list[str] = []
    last = 0
    for match in _WHITESPACE_RUN.finditer(text):
        out.append(_others(text[last : match.start()]))
        out.append(_run(match.group(), block))
        last = match.end()
    out.append(_others(text[last:]))
    return "".join(out)


def _others(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(_code(c) if _hidden(c) else c for c in text)


def clip_title(text: str, limit: int = 200, *, more: str = "") -> str:
    """A tool call's title: `text` made visible on one line, at most `limit` characters and
    then `…` — followed by ` (more)` when the caller shows the whole text elsewhere (e.g.
    "full command below"), so a clipped title never passes for the whole text."""
    line = visible(text.strip())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1] + "…"
    return f"{cut} ({more})" if more else cut


def fenced(text: str, info: str = "") -> str:
    """`text` as a Markdown code block whose fence no run of backticks inside can close."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"
