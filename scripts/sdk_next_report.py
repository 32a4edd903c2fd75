"""`make test-sdk-next`: what the suite says about the next ACP Python SDK, grouped.

Owns the summary printed after the suite ran in `.venv-sdk-next` (the Makefile's
`test-sdk-next`: defect with `agent-client-protocol` at `ACP_SDK_NEXT` installed over the
pin). It reads the run's JUnit XML and prints the totals, then every failure and error
grouped by its cause: the exception's first line with the parts that differ from test to
test (numbers, quoted values, addresses, temporary paths) replaced by `…`, most frequent first,
each with a few of the tests it broke. With no XML (the run died before writing it) it prints
the end of the run's log instead and exits 1.

Invariant: reads only the files it is given; the exit status is 0 whenever the report was
made, however many tests failed (the target reports, it does not gate: docs/acp-additions.md
records the findings).
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

EXAMPLES = 3
"""Tests named under each cause."""
_VARYING = [
    (re.compile(r"0x[0-9a-f]+"), "…"),
    (re.compile(r"(/tmp|/var|/private)[^\s'\"]*"), "…"),
    (re.compile(r"'[^']{0,120}'"), "'…'"),
    (re.compile(r'"[^"]{0,120}"'), '"…"'),
    (re.compile(r"\b\d+(\.\d+)?\b"), "…"),
]


def cause(message: str) -> str:
    """The first line of a failure's message, with what varies between tests blanked."""
    line = next((part.strip() for part in message.splitlines() if part.strip()), "(no message)")
    for pattern, blank in _VARYING:
        line = pattern.sub(blank, line)
    return line[:200]


def report(junit: Path) -> str:
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            for found in case.findall(kind):
                text = found.get("message") or found.text or ""
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                groups[(kind, cause(text))].append(name)
    broken = totals["failures"] + totals["errors"]
    passed = totals["tests"] - broken - totals["skipped"]
    lines = [
        f"{totals['tests']} tests: {passed} passed, {totals['failures']} failed, "
        f"{totals['errors']} errors, {totals['skipped']} skipped",
    ]
    for (kind, text), names in sorted(groups.items(), key=lambda item: -len(item[1])):
        lines.append(f"\n{len(names):5d} {kind}: {text}")
        lines.extend(f"        {name}" for name in names[:EXAMPLES])
        if len(names) > EXAMPLES:
            lines.append(f"        … and {len(names) - EXAMPLES} more")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="the JUnit XML pytest wrote")
    parser.add_argument("--log", type=Path, help="the run's output, shown when there is no XML")
    args = parser.parse_args(argv)
    if not args.junit.is_file():
        sys.stdout.write(f"no test report at {args.junit}: the run stopped before writing it\n")
        if args.log is not None and args.log.is_file():
            tail = args.log.read_text(errors="replace").splitlines()[-40:]
            sys.stdout.write("\n".join(tail) + "\n")
        return 1
    sys.stdout.write(report(args.junit) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
