"""What the README and docs/ show, checked against the code: commands, config keys, links.

Owns reading the repository's Markdown (`doc_files`, `code_blocks`, `inline_spans`) and
five checks, each returning the problems it found as lines naming the file:

- `command_problems`: every `defect …` command shown (in a shell code block, or an inline
  code span that starts with `defect `) names subcommands and options the real CLI accepts,
  and a value of an option with choices is one of them. The CLI is asked itself: its
  `--help`, run through the `defect` entry point `pyproject.toml` declares.
- `toml_problems`: every TOML block passes the real configuration parser,
  `defect_core.config.files.parse_layer`, whose top-level keys are `keys.py`'s `TOP_KEYS`,
  `TABLE_KEYS` and `SHAPED_KEYS` and which checks every nested key (providers, capabilities,
  hooks, MCP servers) against its own table; an inline `key = value` span must pass at the
  top level or set inside one of the blocks' tables.
- `link_problems`: every relative link resolves to a file, and its anchor (if any) to a
  heading of that file; every backticked repository path (`defect_core/…`, `docs/…`) and
  every `docs/NAME.md` of the prose exists; the README links every page (`unlinked_pages`).
  The README is also the package's description on PyPI, where a relative link leads
  nowhere: it links the repository's files by absolute address (`relative_readme_links`),
  under the `Repository` URL of `pyproject.toml`, and those links are checked as files too.
- `code_doc_problems`: every `docs/NAME.md` the packages and scripts name exists.
- `env_problems`: every `DEFECT_*` variable named is in `keys.ENV_VARIABLES` or appears as a
  string literal in the repository's Python code (it is read somewhere).

Invariant: nothing here lists a command, a key, a module or a variable by hand. Everything
is derived from the code (the parser's help, the key tables, the files on disk), so a rename
elsewhere makes these checks fail on the prose that still says the old name, and only the
prose needs fixing.
"""

from __future__ import annotations

import copy as copy_module
import functools
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = ("sh", "bash", "shell", "console")

_FENCE = re.compile(r"^(`{3,})([\w-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
_SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
_ENV_NAME = re.compile(r"\bDEFECT_[A-Z0-9][A-Z0-9_]*\b")
_TOML_SPAN = re.compile(r"^[a-z_]+ = \S.*$")
_DOC_NAME = re.compile(r"(?<![\w/.-])docs/[\w-]+\.md\b")
_OPTION_LINE = re.compile(r"^\s{2}(-.*?)(?:\s{2,}|$)")


@dataclass(frozen=True)
class Doc:
    """One Markdown file: its path relative to the repository, and its text."""

    name: str
    text: str


def doc_files(root: Path = REPO) -> list[Doc]:
    """The README, CONTRIBUTING.md and every page of docs/."""
    paths = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    return [Doc(str(p.relative_to(root)), p.read_text(encoding="utf-8")) for p in paths]


def code_blocks(text: str) -> Iterator[tuple[str, str]]:
    """Each fenced code block: its language (may be empty) and its body."""
    for match in _FENCE.finditer(text):
        yield match.group(2).lower(), match.group(3)


def prose(text: str) -> str:
    """The text without its fenced code blocks."""
    return _FENCE.sub("", text)


def inline_spans(text: str) -> Iterator[str]:
    """Each inline code span of the prose (a span may run over one line break)."""
    for match in _SPAN.finditer(prose(text)):
        yield " ".join(match.group(1).replace("\\|", "|").split())


# --- commands --------------------------------------------------------------------------------


def entry_point(root: Path = REPO) -> tuple[str, str]:
    """The `defect` script of `[project.scripts]`: its module and function."""
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["defect"].partition(":")
    return module, function


@dataclass(frozen=True)
class Help:
    """What `defect <path> --help` said: whether it ran, its usage line, its options."""

    ok: bool
    usage: str
    options: Mapping[str, tuple[str, ...]]


@functools.cache
def cli_help(path: tuple[str, ...]) -> Help:
    """`defect *path --help`, run through the entry point (the installed command's code)."""
    module, function = entry_point()
    code = f"import sys; from {module} import {function} as m; sys.exit(m())"
    result = subprocess.run(
        [sys.executable, "-c", code, *path, "--help"],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    options: dict[str, tuple[str, ...]] = {}
    for line in result.stdout.splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        choices = re.search(r"\{([^}]*)\}", match.group(1))
        for name in re.findall(r"(?<![\w{,])(--?[A-Za-z][\w-]*)", match.group(1)):
            options[name] = tuple(choices.group(1).split(",")) if choices else ()
    usage = " ".join(result.stdout.partition("\n\n")[0].split())
    return Help(result.returncode == 0, usage, options)


def shown_commands(doc: Doc) -> Iterator[list[str]]:
    """Each `defect …` command the file shows, as words after `defect`."""
    lines: list[str] = []
    for language, body in code_blocks(doc.text):
        if language in SHELL_LANGUAGES:
            lines.extend(body.replace("\\\n", " ").splitlines())
    lines.extend(span for span in inline_spans(doc.text) if span.startswith("defect "))
    for line in lines:
        # A synopsis's alternatives (`[--provider a|b]`) are not pipes.
        line = re.sub(r"\[[^\[\]]*\]", lambda m: m.group(0).replace("|", " "), line)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError:
            continue
        segment: list[str] = []
        for word in [*words, ";"]:
            if word and set(word) <= set("|&;<>()"):
                yield from _defect_words(segment)
                segment = []
            else:
                segment.append(word)


def _defect_words(segment: list[str]) -> Iterator[list[str]]:
    while segment and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", segment[0]):
        segment = segment[1:]  # VAR=value before the command
    if segment and (segment[0] == "defect" or segment[0].endswith("/bin/defect")):
        yield [w.strip("[]") for w in segment[1:] if w.strip("[]")]


def command_problems(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in docs:
        for words in shown_commands(doc):
            problem = _command_problem(words)
            if problem:
                problems.append(f"{doc.name}: `defect {' '.join(words)}`: {problem}")
    return problems


def _command_problem(words: list[str]) -> str | None:
    path: tuple[str, ...] = ()
    rest = list(words)
    while rest and not rest[0].startswith("-"):
        probe = cli_help((*path, rest[0]))
        if not probe.ok:
            return f"{' '.join(('defect', *path, rest[0]))} is refused"
        if not probe.usage.startswith(f"usage: {' '.join(('defect', *path, rest[0]))}"):
            break  # a positional argument, not a subcommand
        path = (*path, rest.pop(0))
    known = cli_help(path)
    if not known.ok:
        return f"{' '.join(('defect', *path))} --help fails"
    for i, word in enumerate(rest):
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            continue
        name = word.partition("=")[0]
        if name not in known.options:
            return f"{name} is not an option of {' '.join(('defect', *path))}"
        choices = known.options[name]
        value = word.partition("=")[2] or (rest[i + 1] if i + 1 < len(rest) else "")
        placeholder = value.upper() == value  # `ID`, `NAME`: not a value
        shown = bool(choices and value) and not value.startswith("-") and not placeholder
        if shown and value not in choices:
            return f"{name} {value}: not one of {', '.join(choices)}"
    return None


# --- configuration ---------------------------------------------------------------------------


def toml_blocks(doc: Doc) -> Iterator[str]:
    for language, body in code_blocks(doc.text):
        if language == "toml":
            yield body


def toml_spans(doc: Doc) -> Iterator[dict[str, Any]]:
    """Each inline `key = value` span of the prose that is TOML."""
    for span in inline_spans(doc.text):
        if _TOML_SPAN.match(span):
            try:
                yield tomllib.loads(span)
            except tomllib.TOMLDecodeError:
                continue  # `args_model = <Model>`: Python, not configuration


def toml_problems(docs: list[Doc]) -> list[str]:
    """A TOML block must pass the parser as a whole file. An inline span is a key shown out of
    its table: it must pass at the top level, or set inside a table of one of the blocks."""
    problems = []
    blocks: list[dict[str, Any]] = []
    placeholders: dict[str, str] = {}  # `${VAR}` in an MCP entry: set, so none is missing
    for doc in docs:
        for body in toml_blocks(doc):
            try:
                data = tomllib.loads(body)
            except tomllib.TOMLDecodeError as exc:
                problems.append(f"{doc.name}: not TOML ({exc}): {body!r}")
                continue
            blocks.append(data)
            placeholders.update((name, "x") for name in re.findall(r"\$\{(\w+)\}", body))
            problem = _layer_problem(data, doc.name, placeholders)
            if problem:
                problems.append(problem)
    for doc in docs:
        for span in toml_spans(doc):
            nested = (_set_in(block, path, span) for block in blocks for path in _tables(block))
            tries = [span, *nested]
            if all(_layer_problem(data, doc.name, placeholders) for data in tries):
                problems.append(_layer_problem(span, doc.name, placeholders) or "")
    return problems


def _layer_problem(data: dict[str, Any], source: str, env: dict[str, str]) -> str | None:
    from defect_core.config.files import parse_layer
    from defect_core.config.settings import ConfigError

    try:
        parse_layer(data, source, env=env)
    except ConfigError as exc:
        return str(exc)
    return None


def _tables(data: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in data.items():
        if isinstance(value, dict):
            yield (*path, key)
            yield from _tables(value, (*path, key))


def _set_in(data: dict[str, Any], path: tuple[str, ...], span: dict[str, Any]) -> dict[str, Any]:
    copy = copy_module.deepcopy(data)
    table = copy
    for key in path:
        table = table[key]
    table.update(span)
    return copy


# --- links and paths -------------------------------------------------------------------------


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub writes it."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for match in _HEADING.finditer(prose(text)):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


@functools.cache
def repository_url() -> str:
    """The repository's address, written once: `[project.urls] Repository` of pyproject.toml."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        return str(tomllib.load(handle)["project"]["urls"]["Repository"])


def repository_path(target: str) -> str | None:
    """The repository path an absolute link to one of its files names, else None."""
    for kind in ("blob", "tree"):
        prefix = f"{repository_url()}/{kind}/main/"
        if target.startswith(prefix):
            return target[len(prefix) :]
    return None


def link_problems(docs: list[Doc], root: Path = REPO) -> list[str]:
    problems = []
    for doc in docs:
        for target in _LINK.findall(prose(doc.text)):
            here = (root / doc.name).parent
            if re.match(r"[a-z]+:", target):
                local = repository_path(target)
                if local is None:
                    continue  # https:, mailto: elsewhere
                target, here = local, root
            file_part, _, anchor = target.partition("#")
            path = (here / file_part).resolve()
            if file_part and not path.exists():
                problems.append(f"{doc.name}: link to a missing file: {target}")
                continue
            if not anchor or path.suffix not in (".md", ""):
                continue
            text = path.read_text(encoding="utf-8") if file_part else doc.text
            if anchor not in anchors(text):
                problems.append(f"{doc.name}: link to a missing heading: {target}")
        problems.extend(f"{doc.name}: no such file: {p}" for p in _missing_paths(doc, root))
    return problems


def unlinked_pages(docs: list[Doc]) -> list[str]:
    """The pages of docs/ the README does not link to: the landing page lists the manual."""
    readme = next(doc for doc in docs if doc.name == "README.md")
    linked = {
        (repository_path(target) or target).partition("#")[0]
        for target in _LINK.findall(prose(readme.text))
    }
    return [doc.name for doc in docs if doc.name.startswith("docs/") and doc.name not in linked]


def relative_readme_links(readme: Doc) -> list[str]:
    """The README's links to files by relative path: broken where PyPI shows the README."""
    return [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(readme.text))
        if not re.match(r"[a-z]+:", target) and not target.startswith("#")
    ]


def _missing_paths(doc: Doc, root: Path) -> Iterator[str]:
    """Backticked paths under a top-level directory of the repository, and `docs/NAME.md`
    named in the prose, that do not exist."""
    for name in sorted(set(_DOC_NAME.findall(prose(doc.text)))):
        if not (root / name).exists():
            yield name
    tops = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}
    for span in inline_spans(doc.text):
        for word in span.split():
            word = word.rstrip(".,:;)")
            first = word.split("/", 1)[0]
            shaped = "/" in word and first in tops and not re.search(r"[<>*{$]|\.\.\.", word)
            if shaped and not (root / word).exists():
                yield word


def code_doc_problems(root: Path = REPO) -> list[str]:
    """Every `docs/NAME.md` the packages (`[tool.importlinter] root_packages`) and scripts/
    name exists: a page moved or renamed leaves no docstring, comment or message pointing at
    nothing. (The tests are left out: their workspaces hold pages of their own.)"""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    packages = config["tool"]["importlinter"]["root_packages"]
    problems = []
    for directory in (root / name for name in [*packages, "scripts"]):
        for source in sorted(directory.rglob("*.py")):
            text = source.read_text(encoding="utf-8", errors="replace")
            for name in sorted(set(_DOC_NAME.findall(text))):
                if not (root / name).exists():
                    problems.append(f"{source.relative_to(root)}: no such page: {name}")
    return problems


# --- environment variables -------------------------------------------------------------------


def env_problems(docs: list[Doc], root: Path = REPO) -> list[str]:
    from defect_core.config.keys import ENV_VARIABLES

    read = set(ENV_VARIABLES)
    for directory in (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for source in directory.rglob("*.py"):
            text = source.read_text(encoding="utf-8", errors="replace")
            read.update(re.findall(r"""["'](DEFECT_[A-Z0-9_]+)["']""", text))
    problems = []
    for doc in docs:
        for name in sorted(set(_ENV_NAME.findall(doc.text)) - read):
            problems.append(f"{doc.name}: {name} is read nowhere")
    return problems
