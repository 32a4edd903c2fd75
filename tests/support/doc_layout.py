"""The code's layout as docs/architecture.md and docs/layers.md state it, read back for checking.

Owns two readers and what they are checked against:

- `module_map` reads the module map of docs/architecture.md (the code block under "Module
  map"): a line opening at column 0 with `name/` starts a package's section; in it, a line
  whose text starts at the entry column (that of the first entry) starts an entry, `x.py` or
  `x/`, and deeper lines continue it. `map_problems` checks it against the files: every
  module of every root package (`[tool.importlinter] root_packages` in pyproject.toml) is
  named as `stem.py` in its package's section (top-level modules as entries, a subpackage's
  modules inside its entry, with the nested subpackage's `name/` too), and every `x.py` or
  `x/` the section names exists in that package.
- `layer_rows` and `package_orders` read docs/layers.md: the table of `defect_core`'s
  layers (lowest first; `→` inside a cell orders layers within a row) and every
  "inside `path/`, lowest first: `a` → `b` | `c` → …" sentence (parenthesised remarks
  skipped). `layer_problems` compares each with the `layers` contract of that container in
  pyproject.toml, layer by layer and with the same kind of siblings (`|` independent, `:`
  free to import each other), and the number of numbered contracts with the contracts.

Invariant: nothing is listed by hand. Modules come from walking the packages, contracts from
pyproject.toml, so a module added, moved or renamed fails here until the prose says so.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_ENTRY = re.compile(r"^(\w+(?:\.py|/))(?:\s|$)")
_MODULE_WORD = re.compile(r"(?<![\w/.])(\w+)\.py\b")
_PACKAGE_WORD = re.compile(r"(?<![\w/.])(\w+)/(?=[\s(,·]|$)")


@dataclass
class Entry:
    name: str
    text: str = ""


@dataclass
class Section:
    package: str
    entries: list[Entry] = field(default_factory=list)


def pyproject(root: Path = REPO) -> dict[str, Any]:
    return tomllib.loads((root / "pyproject.toml").read_text())


def root_packages(root: Path = REPO) -> list[str]:
    return list(pyproject(root)["tool"]["importlinter"]["root_packages"])


def contracts(root: Path = REPO) -> list[dict[str, Any]]:
    return list(pyproject(root)["tool"]["importlinter"]["contracts"])


# --- the module map --------------------------------------------------------------------------


def module_map(architecture: str) -> list[Section]:
    start = architecture.index("## Module map")
    block = architecture[architecture.index("```\n", start) + 4 :]
    block = block[: block.index("```")]
    sections: list[Section] = []
    column = 0
    for line in block.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            package, _, rest = line.partition(" ")
            sections.append(Section(package.rstrip("/")))
            column = len(line) - len(rest.lstrip()) if rest.strip() else column
            line = " " * column + rest.lstrip()
        if not sections:
            continue
        indent = len(line) - len(line.lstrip())
        match = _ENTRY.match(line.lstrip())
        if indent == column and match:
            sections[-1].entries.append(Entry(match.group(1), line.lstrip()[match.end() :]))
        elif sections[-1].entries:
            sections[-1].entries[-1].text += " " + line.strip()
    return sections


def modules_of(package: str, root: Path = REPO) -> Iterator[tuple[str, ...]]:
    """Each module file of a package, as its path parts below the package (`("store",
    "calls.py")`); `__init__.py` and `__main__.py` are the package's own."""
    base = root / package
    for path in sorted(base.rglob("*.py")):
        if not path.name.startswith("__"):
            yield path.relative_to(base).parts


def map_problems(architecture: str, root: Path = REPO) -> list[str]:
    sections = {s.package: s for s in module_map(architecture)}
    problems = []
    for package in root_packages(root):
        section = sections.get(package)
        if section is None:
            problems.append(f"{package}/ has no section in the module map")
            continue
        entries = {entry.name: entry for entry in section.entries}
        for parts in modules_of(package, root):
            where = f"{package}/{'/'.join(parts)}"
            if len(parts) == 1:
                if parts[0] not in entries:
                    problems.append(f"{where} is not in the module map")
                continue
            entry = entries.get(parts[0] + "/")
            if entry is None:
                problems.append(f"{where}: {parts[0]}/ is not in the module map")
                continue
            named = set(_MODULE_WORD.findall(entry.text))
            packages = set(_PACKAGE_WORD.findall(entry.text))
            if parts[-1].removesuffix(".py") not in named:
                problems.append(f"{where} is not named in the entry {parts[0]}/")
            problems.extend(
                f"{where}: {sub}/ is not named in the entry {parts[0]}/"
                for sub in parts[1:-1]
                if sub not in packages
            )
        for entry in section.entries:
            problems.extend(_named_but_missing(package, entry, root))
    return problems


def _named_but_missing(package: str, entry: Entry, root: Path) -> Iterator[str]:
    base = root / package
    if not (base / entry.name).exists():
        yield f"the module map names {package}/{entry.name}, which does not exist"
        return
    inside = base / entry.name if entry.name.endswith("/") else base
    for stem in _MODULE_WORD.findall(entry.text):
        if not any(inside.rglob(f"{stem}.py")):
            yield f"the module map names {stem}.py under {package}/{entry.name}: no such module"
    if entry.name.endswith("/"):
        for sub in _PACKAGE_WORD.findall(entry.text):
            if not any(p.is_dir() for p in inside.rglob(sub)):
                yield f"the module map names {sub}/ under {package}/{entry.name}: no such package"


# --- the layers ------------------------------------------------------------------------------


Layers = list[tuple[str, frozenset[str]]]
"""Lowest first: each layer as its kind of siblings ('|', ':' or '' for one) and names."""


def contract_layers(layers: list[str]) -> Layers:
    """A `layers` contract's list (highest first) as `Layers`, lowest first."""
    return [_layer(item) for item in reversed(layers)]


def _layer(text: str) -> tuple[str, frozenset[str]]:
    """One layer: `a` | `b` (docs, backticked) or a | b (a contract's string)."""
    if "`" in text:
        names = frozenset(re.findall(r"`([^`]+)`", text))
        siblings = re.search(r"`\s*:\s*`", text)
    else:
        names = frozenset(n.strip() for n in re.split(r"[|:]", text) if n.strip())
        siblings = re.search(r"\s:\s", text)
    return (":" if siblings else "|" if len(names) > 1 else ""), names


def layer_rows(layers_md: str) -> Layers:
    """The table of `defect_core`'s layers, lowest first (a row's `a` → `b` is two layers)."""
    start = layers_md.index("| # | layer |")
    rows: Layers = []
    for line in layers_md[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cell = re.split(r"(?<!\\)\|", line)[2]
        rows.extend(_layer(part) for part in cell.split("→"))
    return rows


def package_orders(layers_md: str) -> list[tuple[str, Layers]]:
    """Each "inside `path/`…, lowest first: …" sentence: the container and its layers."""
    found = []
    pattern = (
        r"[Ii]nside\s+(?:the\s+\w+\s+package\s+\()?`([\w/]+)/`\)?,\s+lowest\s+first:"
        r"(.*?)(?:\(exhaustive|\n\n)"
    )
    for match in re.finditer(pattern, layers_md, re.S):
        text = _without_remarks(" ".join(match.group(2).split())).partition(";")[0]
        container = match.group(1).replace("/", ".")
        found.append((container, [_layer(part) for part in text.split("→")]))
    return found


def top_order(layers_md: str) -> Layers:
    """The order of the top packages: the contract sentence "lowest first, `a` → `b` …" that
    names no container."""
    match = re.search(r"lowest first,\s+(`[\w.]+`(?:\s*(?:→|\|)\s*`[\w.]+`)+)", layers_md)
    if match is None:
        return []
    return [_layer(part) for part in " ".join(match.group(1).split()).split("→")]


def _without_remarks(text: str) -> str:
    while True:
        shorter = re.sub(r"\([^()]*\)", "", text)
        if shorter == text:
            return shorter.strip(" .")
        text = shorter


def layer_problems(layers_md: str, root: Path = REPO) -> list[str]:
    problems = []
    layered = {
        (c.get("containers") or [""])[0]: c for c in contracts(root) if c["type"] == "layers"
    }
    orders = package_orders(layers_md)
    for container, contract in layered.items():
        expected = contract_layers(contract["layers"])
        if container == "defect_core":
            stated: list[Layers] = [layer_rows(layers_md)]
        elif not container:  # the top packages: "lowest first, `a` → `b` → …"
            stated = [top_order(layers_md)]
        else:
            stated = [layers for name, layers in orders if name == container]
            if not stated:
                problems.append(f"docs/layers.md never states the layers of {container}")
        for layers in stated:
            if layers != expected:
                problems.append(
                    f"docs/layers.md: {container or 'the top packages'}: {_show(layers)}; "
                    f"pyproject.toml: "
                    f"{_show(expected)}"
                )
    problems.extend(
        f"docs/layers.md: {name} has no `layers` contract in pyproject.toml"
        for name, _ in orders
        if name not in layered
    )
    numbered = re.findall(r"^\d+\. \*\*", _contracts_section(layers_md), re.M)
    if len(numbered) != len(contracts(root)):
        problems.append(
            f"docs/layers.md lists {len(numbered)} contracts, pyproject.toml has "
            f"{len(contracts(root))}"
        )
    return problems


def _contracts_section(layers_md: str) -> str:
    start = layers_md.index("## The contracts")
    end = layers_md.find("\n## ", start + 1)
    return layers_md[start : end if end >= 0 else None]


def _show(layers: Layers) -> str:
    return " → ".join(f" {kind} ".join(sorted(names)) for kind, names in layers)
