"""Variables and patterns: what an expectation means, matched against what the agent wrote.

Owns `Variables` (the built-ins and the captures; `${a.b.0}` reaches into captured values),
`match` (one pattern against one value; the first `Mismatch` found, with its path),
`closeness` (ranks the agent's messages nearest a pattern, for a failure report) and `show`
(a value as JSON, shortened for a report).

Invariant: matching has no side effects beyond the `captures` dict it is handed. A trial match
— an `$any_of` branch, a `$contains` probe, a message tried against a pattern it turns out not
to match — never leaks a capture; the caller commits captures only on success. `match`
reports a variable without a value as a mismatch, never as an exception, and a boolean never
equals a number. Only the standard library is imported.

Why: the runner's verdicts and the recorder's output both rest on one precise meaning of a
pattern; keeping it in a small pure module makes that meaning testable on its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from defect_transcript.format import ABSENT, ANY, FULL_VARIABLE, VARIABLE, is_operator

SHOW_LIMIT = 700
"""Characters of a message shown in a failure report (`--verbose` shows all)."""


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
                raise UnknownVariable(f"${{{name}{dotted}}}: no {part!r} in {show(value, 120)}")
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
        whole = FULL_VARIABLE.fullmatch(text)
        if whole and not regex:
            return self.lookup(whole.group(1), whole.group(2) or "")

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "\\$\\{" if regex else "${"
            value = self.lookup(match.group(1), match.group(2) or "")
            text = value if isinstance(value, str) else json.dumps(value)
            return re.escape(text) if regex else text

        return VARIABLE.sub(replace, text)


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
            return Mismatch(path, f"should be absent, got {show(actual, 200)}")
        expected = variables.substitute_text(pattern)
        if _equal(expected, actual):
            return None
        return Mismatch(path, f"expected {show(expected, 200)}, got {show(actual, 200)}")
    if isinstance(pattern, dict) and is_operator(pattern):
        return _match_operators(pattern, actual, variables, captures, path)
    if isinstance(pattern, dict):
        if not isinstance(actual, dict):
            return Mismatch(path, f"expected an object, got {show(actual, 200)}")
        for key, sub in pattern.items():
            where = f"{path}.{key}"
            if sub == ABSENT:
                if key in actual:
                    return Mismatch(where, f"should be absent, got {show(actual[key], 200)}")
                continue
            if key not in actual:
                return Mismatch(where, "missing")
            if problem := _match(sub, actual[key], variables, captures, where):
                return problem
        return None
    if isinstance(pattern, list):
        if not isinstance(actual, list):
            return Mismatch(path, f"expected an array, got {show(actual, 200)}")
        if len(pattern) != len(actual):
            return Mismatch(
                path, f"expected {len(pattern)} items, got {len(actual)}: {show(actual, 300)}"
            )
        for i, (sub, item) in enumerate(zip(pattern, actual, strict=True)):
            if problem := _match(sub, item, variables, captures, f"{path}[{i}]"):
                return problem
        return None
    if _equal(pattern, actual):
        return None
    return Mismatch(path, f"expected {show(pattern, 200)}, got {show(actual, 200)}")


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
            return Mismatch(path, f"expected {show(expected, 200)}, got {show(actual, 200)}")
    if "$type" in pattern and not _has_type(actual, pattern["$type"]):
        return Mismatch(path, f"expected a {pattern['$type']}, got {show(actual, 200)}")
    if "$regex" in pattern:
        regex = variables.substitute_text(pattern["$regex"], regex=True)
        if not isinstance(actual, str) or re.search(str(regex), actual) is None:
            return Mismatch(
                path, f"expected text matching /{pattern['$regex']}/, got {show(actual, 200)}"
            )
    if "$contains" in pattern:
        contained = pattern["$contains"]
        if isinstance(contained, str):
            needle = variables.substitute_text(contained)
            if not isinstance(actual, str) or str(needle) not in actual:
                return Mismatch(path, f"expected text containing {needle!r}, got {show(actual)}")
        else:
            if not isinstance(actual, list):
                return Mismatch(path, f"expected an array, got {show(actual, 200)}")
            for sub in contained:
                if not any(
                    _match(sub, item, variables, dict(captures), path) is None for item in actual
                ):
                    return Mismatch(
                        path, f"no item matches {show(sub, 200)} in {show(actual, 300)}"
                    )
                for item in actual:
                    if _match(sub, item, variables, captures, path) is None:
                        break
    if "$exact" in pattern:
        exact = pattern["$exact"]
        if isinstance(exact, dict):
            if not isinstance(actual, dict):
                return Mismatch(path, f"expected an object, got {show(actual, 200)}")
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
        return Mismatch(path, f"should not match {show(pattern['$not'], 200)}")
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
    if isinstance(pattern, dict) and not is_operator(pattern):
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


def show(value: Any, limit: int | None = SHOW_LIMIT) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
