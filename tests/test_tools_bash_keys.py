"""What an "always" answer about a `bash` command remembers (`defect_core/tools/command_key.py`,
the table in `defect_core/tools/command_table.py`) and how the remembered rules are stored
(`defect_core/policy.py`), table-driven: per program, the key a command gets, and which later
commands an "always allow" of a first one lets run without a question."""

from __future__ import annotations

import json
from typing import Any

import pytest

from defect_core import policy
from defect_core.tools.base import Safety
from defect_core.tools.bash import BashTool
from defect_core.tools.command_key import (
    CommandRule,
    ExactCommand,
    command_key,
    legacy_rule,
    rule_from_json,
    rule_to_json,
)
from defect_core.tools.command_table import PROGRAMS, WHOLE_COMMAND

BASH = BashTool()


def R(program: str, *words: str) -> CommandRule:
    return CommandRule(program, words)


def X(command: str) -> ExactCommand:
    return ExactCommand(command)


KEYS: list[tuple[str, CommandRule | ExactCommand]] = [
    # readers: the program, any plain arguments
    ("ls -la src", R("ls")),
    ("cat README.md", R("cat")),
    ("head -20 a.txt", R("head")),
    ("rg -n foo src", R("rg")),
    ("ls --color=never -1", R("ls")),
    ("ls --some-exec-option", X("ls --some-exec-option")),  # a risky word, listed or not
    ("cat --show-pager-x a", X("cat --show-pager-x a")),
    ("rg --pre ./x foo", X("rg --pre ./x foo")),
    ("rg --pr=./x foo", X("rg --pr=./x foo")),  # an abbreviation of --pre
    ("sort -o out.txt in.txt", X("sort -o out.txt in.txt")),
    ("sort -ro out.txt in.txt", X("sort -ro out.txt in.txt")),  # -o inside a cluster
    ("uniq a.txt b.txt", R("uniq", "a.txt", "b.txt")),  # b.txt is written: keyed
    # sed: print, delete or substitute; never e/w/r, never -i, never -e/-f
    ("sed -n 1p README.md", R("sed")),
    ("sed -n 1,5p a b", R("sed")),
    ("sed s/a/b/g a.txt", R("sed")),
    ("sed -n '1e touch M' README.md", X("sed -n '1e touch M' README.md")),
    ("sed -n 1etouch README.md", X("sed -n 1etouch README.md")),
    ("sed s/a/b/w/tmp/x a.txt", X("sed s/a/b/w/tmp/x a.txt")),
    ("sed s/a/b/e a.txt", X("sed s/a/b/e a.txt")),
    ("sed 1r/etc/passwd a.txt", X("sed 1r/etc/passwd a.txt")),
    ("sed -i s/a/b/ a.txt", X("sed -i s/a/b/ a.txt")),
    ("sed -e 1p a.txt", X("sed -e 1p a.txt")),
    ("sed --in-place s/a/b/ a.txt", X("sed --in-place s/a/b/ a.txt")),
    # tar: listing only
    ("tar -tf /dev/null", R("tar")),
    ("tar -tvzf x.tgz", R("tar")),
    ("tar --list --file=x.tar", R("tar")),
    ("tar -tf host:x.tar", X("tar -tf host:x.tar")),  # a remote archive runs rsh
    ("tar tf x.tar", X("tar tf x.tar")),  # old-style options
    ("tar -xf x.tar", X("tar -xf x.tar")),
    ("tar -cf /dev/null README.md", X("tar -cf /dev/null README.md")),
    ("tar -tf x.tar --to-command=sh", X("tar -tf x.tar --to-command=sh")),
    ("tar -tf x.tar -I ./unpack", X("tar -tf x.tar -I ./unpack")),
    (
        "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch M' README.md",
        X("tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch M' README.md"),
    ),
    # unzip: list, test, print
    ("unzip -l a.zip", R("unzip")),
    ("unzip a.zip", X("unzip a.zip")),
    ("unzip -l a.zip -d /tmp", X("unzip -l a.zip -d /tmp")),
    # make: targets are the key; no variables, no other makefile or directory
    ("make test", R("make", "test")),
    ("make -j4 -k test", R("make", "test")),
    ("make -j install", R("make", "install")),  # -j takes no separate word
    ("make", R("make")),
    ("make test '.SHELLFLAGS=-c \"touch M\"'", X("make test '.SHELLFLAGS=-c \"touch M\"'")),
    ("make test CC=./evil", X("make test CC=./evil")),
    ("make -f other.mk test", X("make -f other.mk test")),
    ("make -C /tmp test", X("make -C /tmp test")),
    ("make --eval=x test", X("make --eval=x test")),
    ("make -E x test", X("make -E x test")),
    # git: subcommand, admitted options; global options make it whole
    ("git status", R("git", "status")),
    ("git status --porcelain -b", R("git", "status")),
    ("git --no-pager log -5 --oneline", R("git", "log")),
    ("git log -1 --format=%H", R("git", "log")),
    ("git log --output-indicator-new=x", X("git log --output-indicator-new=x")),  # a net
    ("git log --diff-filter=M --stat", R("git", "log")),
    ("git status --no-renames", R("git", "status")),
    ("git diff HEAD~1 -- src", R("git", "diff")),
    ("git grep hello", R("git", "grep")),
    ("git grep -n -e hello", R("git", "grep")),
    ("git log -1 --output=/tmp/x", X("git log -1 --output=/tmp/x")),
    ("git log -1 --outp=/tmp/x", X("git log -1 --outp=/tmp/x")),
    ("git diff --ext-diff", X("git diff --ext-diff")),
    ("git show --textconv HEAD:a", X("git show --textconv HEAD:a")),
    ("git grep -Ovim hello", X("git grep -Ovim hello")),
    ("git grep --open-files-in-pager=vim x", X("git grep --open-files-in-pager=vim x")),
    ("git grep --open=vim x", X("git grep --open=vim x")),
    ("git -c core.fsmonitor=x status", X("git -c core.fsmonitor=x status")),
    ("git --git-dir=docs/gd status", X("git --git-dir=docs/gd status")),
    ("git --work-tree=. status", X("git --work-tree=. status")),
    ("git -C /tmp status", X("git -C /tmp status")),
    ("git --exec-path=/tmp status", X("git --exec-path=/tmp status")),
    ("git --config-env=core.pager=X log", X("git --config-env=core.pager=X log")),
    ("git config core.fsmonitor x", X("git config core.fsmonitor x")),
    ("git x", X("git x")),  # perhaps an alias
    ("git submodule foreach x", X("git submodule foreach x")),
    ("git rebase -x make main", X("git rebase -x make main")),
    ("git rebase --exec=make main", X("git rebase --exec=make main")),
    ("git rebase main", R("git", "rebase", "main")),
    ("git fetch --upload-pack=./x origin", X("git fetch --upload-pack=./x origin")),
    ("git fetch origin", R("git", "fetch", "origin")),
    ("git push --receive-pack=./x origin", X("git push --receive-pack=./x origin")),
    ("git push -f origin main", X("git push -f origin main")),
    ("git push origin main", R("git", "push", "origin", "main")),
    ("git branch", R("git", "branch")),
    ("git branch -D main", X("git branch -D main")),
    ("git checkout main", R("git", "checkout", "main")),
    ("git checkout -- main", R("git", "checkout", "--", "main")),
    ("git reset --hard", X("git reset --hard")),
    ("git commit -q -m wip", R("git", "commit")),
    ("git commit --amend -m wip", X("git commit --amend -m wip")),
    ("git rm --cached a.txt", X("git rm --cached a.txt")),
    ("git restore --staged a.txt", X("git restore --staged a.txt")),
    ("git clone --template=./t url dir", X("git clone --template=./t url dir")),
    ("git --version", R("git")),
    # a path-qualified program: its path, the rule of its bare name
    ("/usr/bin/git status", R("/usr/bin/git", "status")),
    ("/usr/bin/git -c alias.x=y x", X("/usr/bin/git -c alias.x=y x")),
    ("./git status", R("./git", "status")),
    ("../bin/ls -l", R("../bin/ls")),
    # builders: the script or target is the key, a few options
    ("npm test", R("npm", "test")),
    ("npm run build", R("npm", "run", "build")),
    ("npm run build --script-shell=./x", X("npm run build --script-shell=./x")),
    ("npm install left-pad", R("npm", "install", "left-pad")),
    ("cargo build --release", R("cargo", "build")),
    ("cargo build --config=x", X("cargo build --config=x")),
    ("go test -race -count=1 ./...", R("go", "test", "./...")),
    ("go test -exec=./x ./...", X("go test -exec=./x ./...")),
    ("go test -toolexec ./x ./...", X("go test -toolexec ./x ./...")),
    ("pytest -q -x -k parse tests/test_a.py", R("pytest")),
    ("pytest -p evil tests", X("pytest -p evil tests")),
    ("pytest --basetemp=/ tests", X("pytest --basetemp=/ tests")),
    ("pytest -c other.ini", X("pytest -c other.ini")),
    ("ruff check .", R("ruff", "check")),
    ("ruff check --fix .", X("ruff check --fix .")),
    ("ruff format src", R("ruff", "format", "src")),
    # whole: unknown programs, wrappers, interpreters, editors
    ("vim --version", X("vim --version")),
    ("zip -T /dev/null", X("zip -T /dev/null")),
    ("python  script.py", X("python  script.py")),
    ("sudo ls", X("sudo ls")),
    ("env ls", X("env ls")),
    ("find . -name x", X("find . -name x")),
    ("docker ps", X("docker ps")),
    # not plain: quoting, expansion, globs, shell syntax, assignments
    ("git log --grep 'a b'", X("git log --grep 'a b'")),
    ("ls *.py", X("ls *.py")),
    ("ls ~/x", R("ls")),
    ("cat $HOME/.bashrc", X("cat $HOME/.bashrc")),
    ("git grep $'\\x2dO' x", X("git grep $'\\x2dO' x")),
    ("git grep \\-Ovim x", X("git grep \\-Ovim x")),
    ("git status && rm -rf /", X("git status && rm -rf /")),
    ("git status; touch M", X("git status; touch M")),
    ("git status | sh", X("git status | sh")),
    ("git status\ntouch M", X("git status\ntouch M")),
    ("git status\rx", X("git status\rx")),
    ("git status & touch M", X("git status & touch M")),
    ("{ git status; touch M; }", X("{ git status; touch M; }")),
    ("echo `touch M`", X("echo `touch M`")),
    ("echo $(touch M)", X("echo $(touch M)")),
    ("X=1 git status", X("X=1 git status")),
    ("GIT_CONFIG_COUNT=1 git status", X("GIT_CONFIG_COUNT=1 git status")),
    ("git status > out", X("git status > out")),
    ("git log # x", X("git log # x")),
    ("echo 'unterminated", X("echo 'unterminated")),
    ("  git status  ", R("git", "status")),
]


@pytest.mark.parametrize(("command", "key"), KEYS)
def test_each_command_gets_the_key_of_its_program(
    command: str, key: CommandRule | ExactCommand
) -> None:
    assert command_key(command) == key
    assert BASH.permission_key({"command": command}) == key


def runs_unasked_after(allowed: str, later: str) -> bool:
    """Whether `later` runs without a question once `allowed` got an "always allow"."""
    rules = policy.PermissionRules()
    rules.remember(command_key(allowed), allow=True)
    decision = policy.decide("ask", Safety.MUTATING, "execute", command_key(later), rules)
    return isinstance(decision, policy.Allow)


COVERS: list[tuple[str, str, bool]] = [
    # each harmless command still runs unasked the second time
    *(
        (c, c, True)
        for c in (
            "sed -n 1p README.md", "tar -tf /dev/null", "git grep hello", "make test",
            "zip -T /dev/null", "vim --version", "/usr/bin/git status", "git status",
            "git log -1", "cd x && make",
        )
    ),
    # and covers what does what it did
    ("git status", "git status --porcelain", True),
    ("git log -1", "git log -3 --stat", True),
    ("make test", "make -j8 test", True),
    ("sed -n 1p README.md", "sed -n 2,4p docs/a.md", True),
    # never what runs code or writes
    ("sed -n 1p README.md", "sed -n '1e touch M' README.md", False),
    ("tar -tf /dev/null", "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch M' README.md", False),  # noqa: E501
    ("git grep hello", "git grep --open-files-in-pager='touch M' hello", False),
    ("make test", "make test '.SHELLFLAGS=-c \"touch M\"'", False),
    ("make test", "make install", False),
    ("zip -T /dev/null", "zip x.zip README.md -T -TT 'touch M'", False),
    ("vim --version", "vim -es -c '!touch M' -c 'q!'", False),
    ("/usr/bin/git status", "/usr/bin/git -c core.fsmonitor='touch M' status", False),
    ("/usr/bin/git status", "/usr/bin/git -c alias.x='!touch M' x", False),
    ("/usr/bin/git status", "git status", False),
    ("git status", "./git status", False),
    ("git status", "git --git-dir=docs/gd --work-tree=. status", False),
    ("git log -1", "git log -1 --format='format:echo pwned' --output=$HOME/.bashrc", False),
    ("git log -1", "git log -1 --output=/home/u/.bashrc", False),
    ("git status", "git status; touch M", False),
    ("git status", "git -c core.fsmonitor='touch M' status", False),
    ("git status", "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='touch M' git status", False),  # noqa: E501
    ("echo touch M", "echo\ntouch M", False),  # the whole line, not its spacing
    ("cd x && make", "cd x  &&  make", False),
]  # fmt: skip


@pytest.mark.parametrize(("allowed", "later", "covered"), COVERS)
def test_always_covers_only_what_does_what_was_seen(
    allowed: str, later: str, covered: bool
) -> None:
    assert runs_unasked_after(allowed, later) is covered


@pytest.mark.parametrize("program", sorted(WHOLE_COMMAND))
def test_programs_keyed_whole_are_never_generalised(program: str) -> None:
    assert program not in PROGRAMS
    assert command_key(f"{program} -q file") == X(f"{program} -q file")
    assert command_key(f"/usr/bin/{program} file") == X(f"/usr/bin/{program} file")


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_program_of_the_table_refuses_what_it_does_not_know(program: str) -> None:
    """An allow-list admits no unknown option; a deny-list none of its excluded ones."""
    spec = PROGRAMS[program]
    rules = [spec.args] if spec.args is not None else list(spec.subcommands.values())
    subs = [""] if spec.args is not None else [f" {s}" for s in spec.subcommands]
    for rule, sub in zip(rules, subs, strict=True):
        assert rule is not None
        probes = ["--no-such-option-anywhere"] if rule.options == "allow" else []
        probes += [n.rstrip("=#") for n in rule.names] if rule.options == "deny" else []
        for probe in probes:
            command = f"{program}{sub} {probe} x"
            assert isinstance(command_key(command), ExactCommand), command


# --- the stored form --------------------------------------------------------------------------


def test_rules_round_trip_through_the_versioned_stored_form() -> None:
    rules = policy.PermissionRules()
    for allowed in ("git status", "cd x && make", "npm run build"):
        rules.remember(command_key(allowed), allow=True)
    rules.remember("write_file", allow=True)
    rules.remember("fetch:example.com", allow=True)
    rules.remember(command_key("rm -rf build"), allow=False)
    stored = json.loads(json.dumps(rules.to_dict()))
    assert stored["version"] == policy.RULES_VERSION
    assert {"tool": "bash", "program": "git", "words": ["status"], "arguments": "admitted"} in (
        stored["allowed"]
    )
    assert {"tool": "bash", "command": "cd x && make"} in stored["allowed"]
    restored = policy.restore_rules(stored)
    assert restored.dropped == ()
    assert restored.rules == rules


def test_old_keys_are_kept_only_when_the_new_rule_grants_no_more() -> None:
    old = {
        "allowed": [
            "bash:git status",  # now: git status with admitted arguments
            "bash:make test",
            "bash:ls",
            "bash:/usr/bin/git",  # meant every subcommand
            "bash:tar",  # meant every mode
            "bash:cd x && make",  # a whole command, its spacing lost
            "bash:python script.py",
            "write_file",
            "fetch:example.com",
        ],
        "rejected": ["bash:rm -rf build", "bash:git push"],
    }
    restored = policy.restore_rules(old)
    assert restored.rules.allowed == {
        R("git", "status"),
        R("make", "test"),
        R("ls"),
        "write_file",
        "fetch:example.com",
    }
    assert restored.dropped == ("/usr/bin/git", "tar", "cd x && make", "python script.py")
    assert restored.rules.rejected == {X("rm -rf build"), R("git", "push")}


@pytest.mark.parametrize(
    "stored",
    [
        {"version": 99, "allowed": ["write_file"]},
        {"version": 2, "allowed": ["bash:git status"]},
        {"version": 2, "allowed": [{"tool": "bash", "program": "git", "words": "status"}]},
        {
            "version": 2,
            "allowed": [{"tool": "bash", "program": "git", "words": [], "arguments": "any"}],
        },
        {"version": 2, "allowed": [{"tool": "bash", "command": ""}]},
        {"version": 2, "allowed": [["git", "status"]]},
    ],
)
def test_stored_rules_not_understood_are_dropped_and_named(stored: dict[str, Any]) -> None:
    restored = policy.restore_rules(stored)
    assert restored.rules.allowed == set()
    assert len(restored.dropped) == 1


def test_nothing_stored_restores_nothing() -> None:
    for stored in (None, {}, {"allowed": "x"}):
        restored = policy.restore_rules(stored)
        assert restored.rules == policy.PermissionRules() and restored.dropped == ()


def test_rule_json_is_strict() -> None:
    assert rule_from_json(rule_to_json(R("git", "log"))) == R("git", "log")
    assert rule_from_json(rule_to_json(X("a && b"))) == X("a && b")
    assert rule_from_json({"tool": "fetch", "command": "x"}) is None
    assert rule_from_json({"tool": "bash", "command": "x", "extra": 1}) is None
    assert legacy_rule("git  status") == R("git", "status")
    assert legacy_rule("git") is None
