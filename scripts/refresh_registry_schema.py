"""Refresh the vendored ACP registry schema (`tests/schema/registry/agent.schema.json`).

Owns the one way the repository's copy of the ACP registry's `agent.schema.json` changes:
download it (the registry's published copy, or the file at a commit or tag of its repository
`agentclientprotocol/registry`), check it is the schema of a registry entry, and write it.

Invariant: nothing is written unless the download parses as a JSON Schema object whose
`required` names at least `id`, `version` and `distribution` (what `agent.json` and
`scripts/release_check.py` rely on); a failed download leaves the vendored copy as it was.

Why a script: `tests/test_registry.py` validates `agent.json` against this file, so it lives
in the repository (a clone checks its manifest offline) and changes only on purpose,
reviewed as a diff, like the ACP schema (`scripts/refresh_acp_schema.py`).

Usage: `python scripts/refresh_registry_schema.py [--ref COMMIT_OR_TAG] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import urllib.request
from pathlib import Path

PUBLISHED = "https://cdn.agentclientprotocol.com/registry/v1/latest/agent.schema.json"
AT_REF = "https://raw.githubusercontent.com/agentclientprotocol/registry/{ref}/agent.schema.json"
OUT = Path(__file__).resolve().parents[1] / "tests" / "schema" / "registry" / "agent.schema.json"
REQUIRED = frozenset({"id", "version", "distribution"})
"""What an entry must carry for the checks of this repository to mean anything."""


class RefreshError(Exception):
    """The download failed, or is not the registry's entry schema."""


def source_url(ref: str | None) -> str:
    """Where the schema is read from: the published copy, or the file at `ref`."""
    return PUBLISHED if ref is None else AT_REF.format(ref=ref)


def check_schema(data: bytes) -> dict[str, object]:
    """The parsed schema, when `data` is the registry's entry schema; else `RefreshError`."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise RefreshError(f"not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("type") != "object":
        raise RefreshError("not a JSON Schema of an object")
    required = document.get("required")
    if not isinstance(required, list) or not set(required) >= REQUIRED:
        raise RefreshError(f"its `required` lacks {sorted(REQUIRED - set(required or []))}")
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", help="a commit or tag of agentclientprotocol/registry")
    parser.add_argument("--out", type=Path, default=OUT, help="file to write")
    args = parser.parse_args(argv)
    url = source_url(args.ref)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
        check_schema(data)
    except (RefreshError, OSError) as exc:
        print(f"refresh_registry_schema: {url}: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"{url}\n  {args.out.name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    print("Update tests/schema/registry/README.md, then run tests/test_registry.py.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
