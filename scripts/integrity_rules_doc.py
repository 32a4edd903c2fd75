"""Write the rules of the outbound repair into the docs, from the one table that states them.

Owns the sections of docs/architecture.md and docs/provider-wire.md between the markers
`<!-- integrity-rules:begin -->` and `<!-- integrity-rules:end -->`: their text is
`defect_core.integrity.rules.rules_markdown()`, so the docs list exactly the rules the
validator reports and the repair applies. `tests/test_integrity_rules.py` fails when a section
is out of date; this script brings it up to date.

Usage: python scripts/integrity_rules_doc.py [--check]   (--check: exit 1 if out of date)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from defect_core.integrity.rules import rules_markdown

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- integrity-rules:begin -->\n"
END = "<!-- integrity-rules:end -->\n"
SECTIONS = {
    ROOT / "docs" / "architecture.md": rules_markdown(),
    ROOT / "docs" / "provider-wire.md": rules_markdown(with_fixes=False),
}
"""Each doc and the text its section must hold."""


def section(text: str) -> str:
    """The text between the markers of `text` (ValueError when they are missing)."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END, start)]


def updated(text: str, body: str) -> str:
    start = text.index(BEGIN) + len(BEGIN)
    return text[:start] + body + text[text.index(END, start) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report, exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for path, body in SECTIONS.items():
        text = path.read_text(encoding="utf-8")
        if section(text) != body:
            stale.append(path)
            if not args.check:
                path.write_text(updated(text, body), encoding="utf-8")
    for path in stale:
        verb = "is out of date" if args.check else "updated"
        print(f"{path.relative_to(ROOT)}: {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
