"""Which protected paths a shell command names, as far as its text can be read.

Owns `protected_in_command`: the reason a `bash` call is asked every time (or None), read
from the command's words with `shlex` (quotes and escapes removed, shell punctuation split
off, so `echo x>.git/config`, `'.g'it` and `.g\\it` are read as the shell reads them), and
from the raw text split into path-like fragments (a path inside `$(...)` or inside a
`python -c` string).

Invariant: a command is asked every time when it cannot be read (unbalanced quotes), when a
word or fragment names a protected path (`tools/protected.py`: as a redirection target, an
argument, a `cd` target, an option's value, after following symlinks from the working
directory), when a glob could match a protected name (`.gi?/config`), when its working
directory is protected, and when it runs `git config` to write (or `git -c`, which sets
configuration for one run): those change `.git/config`'s effect without naming it.

What it cannot do: a path assembled at run time (`$D/config`, `$(printf …)`, a script that
writes the file) is not seen. Bash is not sandboxed; this check keeps an "always" answer
from covering a command whose text names a protected path, it does not confine commands.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from defect_core.tools.protected import fragments, glob_matches_protected, protected_path
from defect_core.tools.shown import visible

UNREADABLE = "the command cannot be read as shell words (unbalanced quotes): asked every time"
_PUNCTUATION = frozenset("();<>|&")
_GIT_CONFIG_READS = frozenset(
    {"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "get", "list"}
)


def words(command: str) -> list[str] | None:
    """The command's words and operators as the shell splits them (no expansion), or None
    when it cannot be read. Comments are read as words: nothing of the text is skipped."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


def protected_in_command(command: str, workdir: Path, root: Path) -> str | None:
    """Why `command`, run in `workdir` inside the workspace `root`, is asked every time."""
    reason = protected_path(str(workdir), root, root)
    if reason is not None:
        return f"its working directory: {reason}"
    tokens = words(command)
    if tokens is None:
        return UNREADABLE
    plain = [t for t in tokens if not set(t) <= _PUNCTUATION]
    for word in plain:
        if glob_matches_protected(word):
            return f"`{visible(word)}` may match a protected path: asked every time"
        for fragment in fragments(word):
            reason = protected_path(fragment, workdir, root)
            if reason is not None:
                return reason
    for fragment in fragments(command):
        if fragment != command:
            reason = protected_path(fragment, workdir, root)
            if reason is not None:
                return reason
    return _git_config(tokens)


_GIT_VALUE_OPTIONS = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})
_CONFIG_OPTIONS = ("-c", "--config-env")


def _git_config(tokens: list[str]) -> str | None:
    """The reason a `git config` that writes, or a `git -c`, is asked every time."""
    for i, word in enumerate(tokens):
        if os.path.basename(word) != "git":
            continue
        rest = tokens[i + 1 :]
        j = 0
        while j < len(rest) and not set(rest[j]) <= _PUNCTUATION:
            option = rest[j]
            if option in _CONFIG_OPTIONS or option.startswith("--config-env="):
                return (
                    "`git -c` sets git configuration for the run, and its settings can run "
                    "code (core.fsmonitor): asked every time"
                )
            if option in _GIT_VALUE_OPTIONS:
                j += 2
                continue
            if option.startswith("-"):
                j += 1
                continue
            if option == "config" and not _reads_only(rest[j + 1 :]):
                return (
                    "`git config` writes .git/config, whose settings can run code "
                    "(core.fsmonitor, core.hooksPath): asked every time"
                )
            break
    return None


def _reads_only(after: list[str]) -> bool:
    """`git config` with these words only reads (`--get`, `--list`, `get`, `list`, ...)."""
    for word in after:
        if set(word) <= _PUNCTUATION:
            break
        if word in _GIT_CONFIG_READS:
            return True
    return False
