"""The table of programs whose commands an "always allow" may generalise, and how far.

Owns `PROGRAMS` (per program: its subcommands, and for each the argument rule a remembered
answer admits) and `WHOLE_COMMAND` (programs whose every command is keyed whole, listed so
the reason is written down). `defect_core/tools/command_key.py` reads the table; this module
is data and the two small types that shape it.

Invariant: a program is here only with the options that make it run code or write files
excluded from what its rule admits — by an allow-list (`ArgRule.options == "allow"`: only
the listed options) where a program has many such options or a mode decides everything
(`tar`, `sed`, `make`, builders), by a deny-list (`"deny"`: every option but the listed ones,
abbreviations of a listed long option included) where the program mostly reads (`git log`,
`ls`). A program missing from `PROGRAMS` is keyed by its whole command line: adding one here
widens what an "always" answer grants, so each entry says why it is safe.

How an `ArgRule` names options:
- `--name`: a long option without a value; `--name=`: one whose value is attached
  (`--name=value`; a separate value word is not recognised, so it reads as an operand).
- `-x`: a short flag (it may be clustered: `-tvf`); `-x=`: a short option taking a value, the
  rest of its cluster or else the next word; `-x#`: a value that is only ever attached
  (`-j4`; make's `-j` takes no separate word, so `make -j install` keys `install`).
- `-name` (several letters after one dash): a whole word, as `go` spells its flags.
In a deny-list the plain names are enough: `-x` excludes every cluster holding `x`; and a
deny-list never admits a long option whose name holds one of `RISKY_WORDS`.

Operands: `"free"` — any plain word (file names, revisions, patterns); `"key"` — each one is
part of the key (make's targets, npm's script, a branch to delete), so allowing `make test`
never allows `make install`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

PLAIN = re.compile(r"[A-Za-z0-9_@%+,./:=^~-]+")
"""A plain word: no quoting, globbing, expansion nor shell syntax can hide in it."""


@dataclass(frozen=True, slots=True)
class ArgRule:
    """What may follow a program (or its subcommand) in a command "always" covers."""

    options: Literal["allow", "deny"]
    names: frozenset[str] = frozenset()
    operands: Literal["free", "key"] = "free"
    plain: re.Pattern[str] = PLAIN
    """What an operand or an option's value must match (narrower than `PLAIN` for some)."""
    first_operand: re.Pattern[str] | None = None
    """What the first operand must match (sed's script)."""
    require: frozenset[str] = frozenset()
    """At least one of these options must be given (tar's `-t`: listing, not creating)."""
    leading_option: bool = False
    """The first argument must be an option (tar reads a bare first word as options)."""


@dataclass(frozen=True, slots=True)
class Program:
    """A program of the table: one argument rule, or one per subcommand."""

    args: ArgRule | None = None
    subcommands: Mapping[str, ArgRule] = field(default_factory=dict)
    before: frozenset[str] = frozenset()
    """Options admitted before the subcommand (git's `--no-pager`); any other makes the
    command unkeyable (`git -c`, `--git-dir`, `-C`, `--exec-path`, `--config-env`, ...)."""


def allow(
    *names: str,
    operands: Literal["free", "key"] = "free",
    plain: re.Pattern[str] = PLAIN,
    first_operand: re.Pattern[str] | None = None,
    require: frozenset[str] = frozenset(),
    leading_option: bool = False,
) -> ArgRule:
    """Only the options `names` (see the module doc for how they are spelled)."""
    return ArgRule(
        "allow", frozenset(names), operands, plain, first_operand, require, leading_option
    )


def deny(*names: str, operands: Literal["free", "key"] = "free") -> ArgRule:
    """Every option but `names` (and abbreviations of the long ones)."""
    return ArgRule("deny", frozenset(names), operands)


RISKY_WORDS = (
    "exec", "command", "cmd", "pager", "editor", "shell", "output", "config", "template",
    "hook", "script", "program", "upload-pack", "receive-pack",
)  # fmt: skip
"""A long option holding one of these is never admitted by a deny-list, listed or not: a net
under the lists above for an option nobody thought of (`--output-indicator-new` is asked
about too; better once too often)."""

READER = deny()
"""A program that only reads and prints: any plain options and operands."""

# A sed script that only prints, deletes or substitutes: no `e` (execute), `w`/`W` (write),
# `r`/`R` (read), no `s///e` or `s///w` flags. One command; `;` would be shell syntax anyway.
_SED_ADDRESS = r"(?:[0-9]+|/[^/]*/)"
SED_SCRIPT = re.compile(
    rf"(?:{_SED_ADDRESS}(?:,{_SED_ADDRESS})?)?(?:[pdq=]|s/[^/]*/[^/]*/[gpiImM0-9]*)"
)

_GIT_READ = deny(
    # write a file, run a configured diff or text-conversion command, open a pager command
    "--output", "--ext-diff", "--textconv", "--open-files-in-pager", "-O", "--filters",
)  # fmt: skip

GIT = Program(
    before=frozenset({"--no-pager", "-P", "--no-optional-locks", "--version"}),
    subcommands={
        **{
            sub: _GIT_READ
            for sub in (
                "status", "log", "show", "diff", "grep", "blame", "annotate", "shortlog",
                "describe", "rev-parse", "rev-list", "ls-files", "ls-tree", "cat-file",
                "show-ref", "merge-base", "name-rev", "diff-tree", "diff-files", "diff-index",
                "whatchanged", "count-objects", "version", "check-ignore", "check-attr",
                "show-branch", "cherry", "for-each-ref",
            )
        },
        # Changes inside the repository: what is named is part of the key, and the options
        # that run an editor or a command, force or delete are excluded.
        "add": deny("-p", "--patch", "-i", "--interactive", "-e", "--edit"),
        "commit": deny(
            "-c", "--reedit-message", "-e", "--edit", "--template", "-t", "--interactive",
            "-p", "--patch", "--amend",
        ),
        "fetch": deny("--upload-pack", operands="key"),
        "pull": deny("--upload-pack", "-s", "--strategy", operands="key"),
        "push": deny(
            "--receive-pack", "--exec", "-f", "--force", "--force-with-lease",
            "--force-if-includes", "--mirror", "-d", "--delete", "--prune", operands="key",
        ),
        "clone": deny(
            "--upload-pack", "-u", "--template", "-c", "--config", "--separate-git-dir",
            operands="key",
        ),
        "checkout": deny("-f", "--force", "-p", "--patch", operands="key"),
        "switch": deny("-f", "--force", "--discard-changes", operands="key"),
        "reset": deny("--hard", "--merge", "--keep", "-p", "--patch", operands="key"),
        "merge": deny("-s", "--strategy", "-e", "--edit", operands="key"),
        "rebase": deny(
            "-x", "--exec", "-i", "--interactive", "-s", "--strategy", "--edit-todo",
            operands="key",
        ),
        "cherry-pick": deny("-e", "--edit", "--strategy", operands="key"),
        "revert": deny("-e", "--edit", "--strategy", operands="key"),
        "stash": deny("-p", "--patch", operands="key"),
        "branch": deny(
            "-d", "-D", "--delete", "-f", "--force", "-m", "-M", "--move", "-c", "-C", "--copy",
            "--edit-description", "-u", "--set-upstream-to", "--unset-upstream",
            operands="key",
        ),
        "tag": deny("-d", "--delete", "-f", "--force", "-e", "--edit", operands="key"),
        "remote": deny(operands="key"),
        "init": deny("--template", "--separate-git-dir", operands="key"),
    },
)  # fmt: skip
"""Not here, so keyed whole: `config` (sets `core.fsmonitor`, aliases), `submodule`
(`foreach`), `bisect` (`run`), `filter-branch`, `difftool`, `mergetool`, `archive`,
`bundle`, `format-patch`, `worktree`, `clean`, `gc`, `send-email`, `daemon`, `instaweb`,
`help`; `rm`, `mv`, `restore` and `reflog`, whose options turn a harmless command into one
that deletes (`git rm --cached x` and `git rm -f x` would share a key); and any alias (an
alias is a word git does not know as a command)."""

_BUILDER_OPTIONS = ("-q", "--quiet", "-v", "--verbose")

PROGRAMS: dict[str, Program] = {
    **{
        name: Program(READER)
        for name in (
            "ls", "cat", "head", "tail", "wc", "pwd", "echo", "grep", "diff", "cmp", "comm",
            "which", "stat", "du", "df", "basename", "dirname", "realpath", "readlink", "nl",
            "cut", "tr", "seq", "tac", "rev", "true", "false", "whoami", "id", "uname",
        )
    },
    "date": Program(deny("-s", "--set")),  # setting the clock
    "file": Program(deny("-C", "--compile")),  # writes a compiled magic file
    "tree": Program(deny("-o", "-R")),  # writes its output to a file
    "sort": Program(deny("-o", "--output", "--compress-program", "-T", "--temporary-directory")),
    "uniq": Program(deny(operands="key")),  # a second operand is the file it writes
    "rg": Program(deny("--pre", "--hostname-bin", "-z", "--search-zip")),  # runs programs
    "git": GIT,
    "sed": Program(
        allow(
            "-n", "--quiet", "--silent", "-E", "-r", "--regexp-extended", "-s", "--separate",
            "-z", "--null-data", "-u", "--unbuffered", "--posix",
            first_operand=SED_SCRIPT,
        )
    ),  # not -i (edits files), -e/-f (scripts the check cannot see), e/w/W/r in a script
    "tar": Program(
        allow(
            "-t", "--list", "-v", "--verbose", "-f=", "--file=", "-z", "--gzip", "-j",
            "--bzip2", "-J", "--xz", "--zstd",
            require=frozenset({"-t", "--list"}),
            leading_option=True,
            plain=re.compile(r"[A-Za-z0-9_@%+,./=^~-]+"),  # `host:file` is a remote archive
        )
    ),  # listing only: not create/extract, --checkpoint-action, --to-command, -I, -F, ...
    "unzip": Program(
        allow("-l", "-t", "-v", "-q", "-p", require=frozenset({"-l", "-t", "-v", "-p"}))
    ),  # listing, testing or printing; extracting writes files
    "make": Program(
        allow(
            "-j#", "--jobs=", "-k", "--keep-going", "-s", "--silent", "--quiet", "-n",
            "--dry-run", "--just-print", "-w", "--print-directory", "--no-print-directory",
            operands="key",
            plain=re.compile(r"[A-Za-z0-9_@%+,./:^~-]+"),  # `VAR=value` sets a variable
        )
    ),  # not -f, -C, -E/--eval, -I, -e, -o, -W: another makefile, directory or variables
    "pytest": Program(
        allow(
            "-q", "-v", "-x", "-s", "-l", "-k=", "-m=", "-n=", "-r#", "--lf", "--last-failed",
            "--ff", "--failed-first", "--exitfirst", "--quiet", "--verbose", "--tb=",
            "--maxfail=", "--durations=", "--no-header", "--co", "--collect-only",
            "--showlocals", "--sw", "--stepwise", "--disable-warnings",
        )
    ),  # not -p (loads a module), -c/-o/--rootdir (another configuration), --basetemp
    # (deleted and rewritten), --junitxml and other report files, -W (imports a category)
    **{
        name: Program(allow("--silent", "-s", "--if-present", *_BUILDER_OPTIONS, operands="key"))
        for name in ("npm", "pnpm", "yarn")
    },  # the script or package is part of the key; not --script-shell, --prefix, -c, ...
    "cargo": Program(
        allow(
            *_BUILDER_OPTIONS, "--release", "--all-targets", "--workspace", "--lib", "--bins",
            "--tests", "--all-features", "--no-default-features", "--locked", "--offline",
            "--frozen", "-p=", "--package=", "--features=", "--bin=", "--test=",
            operands="key",
        )
    ),  # not --config (sets a runner), -Z, --manifest-path, --target-dir
    "go": Program(
        allow(
            "-v", "-race", "-short", "-cover", "-count=", "-run=", "-timeout=",
            operands="key",
        )
    ),  # not -exec, -toolexec, -o, -modfile, -overlay
    "ruff": Program(
        subcommands={
            "check": deny(
                "--fix", "--unsafe-fixes", "--add-noqa", "-o", "--output-file", "--cache-dir",
                "--watch",
            ),
            "format": deny("--cache-dir", operands="key"),
        }
    ),
}  # fmt: skip

WHOLE_COMMAND = frozenset(
    {
        # interpreters and shells: their arguments are a program
        "python", "python3", "node", "deno", "bun", "perl", "ruby", "php", "lua", "sh", "bash",
        "dash", "zsh", "fish", "ksh", "busybox",
        # wrappers: they run the command in their arguments
        "env", "nice", "nohup", "timeout", "time", "watch", "xargs", "sudo", "doas", "su",
        "exec", "eval", "command", "builtin", "source", "npx", "pnpx", "bunx", "uvx", "uv",
        # editors, pagers, viewers: each can run a shell command
        "vim", "vi", "nvim", "view", "ex", "emacs", "nano", "less", "more", "man",
        # programs whose expressions execute or write
        "awk", "gawk", "mawk", "find", "zip", "dd",
        # deleting, permissions, network copies
        "rm", "rmdir", "shred", "truncate", "chmod", "chown", "ssh", "scp", "rsync", "curl",
        "wget", "kill", "pkill", "killall",
    }
)  # fmt: skip
"""Programs keyed by the whole command line, whatever their arguments. Every program missing
from `PROGRAMS` is, too; these are named so that nobody adds one of them to the table."""
