"""Refresh the vendored ACP JSON Schema (`tests/schema/`) from the published npm package.

Owns the one way the test suite's copy of the ACP schema changes: download the tarball of
`@agentclientprotocol/sdk` (a version, or the `latest` dist-tag) from the npm registry, take
its stable and unstable v1 schema out of it, and write them as `tests/schema/schema.v1.json`
and `tests/schema/schema.v1.unstable.json`.

Invariant: nothing is written unless both files were found in the tarball and parse as JSON
Schema documents with `$defs`; a failed download or a package without the schema leaves the
vendored copy as it was.

Why a script: the tests validate every agent message against these files, so they must live
in the repository (a clone runs its tests offline) and change only on purpose, reviewed as a
diff. Releases 2.x ship `package/schema/v1/schema.json` + `schema.unstable.json`; the
flat `package/schema/schema.json` + `schema.unstable.json` layout is understood too (1.x
releases carry only the stable file there, so they are refused).

Usage: `python scripts/refresh_acp_schema.py [--version X.Y.Z] [--out DIR]` (`make acp-schema`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

PACKAGE = "@agentclientprotocol/sdk"
REGISTRY = "https://registry.npmjs.org"
OUT = Path(__file__).resolve().parents[1] / "tests" / "schema"

LAYOUTS: list[dict[str, str]] = [
    {
        "schema.v1.json": "package/schema/v1/schema.json",
        "schema.v1.unstable.json": "package/schema/v1/schema.unstable.json",
    },
    {
        "schema.v1.json": "package/schema/schema.json",
        "schema.v1.unstable.json": "package/schema/schema.unstable.json",
    },
]
"""Where each vendored file sits inside the package tarball, newest layout first."""


class RefreshError(Exception):
    """The package could not be fetched, or does not carry the schema."""


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)


def tarball_url(version: str) -> tuple[str, str]:
    """The resolved version and tarball URL of `PACKAGE` at `version` (or a dist-tag)."""
    meta = _get_json(f"{REGISTRY}/{PACKAGE}")
    resolved = meta.get("dist-tags", {}).get(version, version)
    release = meta.get("versions", {}).get(resolved)
    if release is None:
        raise RefreshError(f"{PACKAGE} has no version {version!r}")
    return resolved, str(release["dist"]["tarball"])


def extract_schemas(tarball: bytes) -> dict[str, bytes]:
    """The vendored file name → contents, taken from an npm package tarball (`.tgz`)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
            return _extract(archive)
    except tarfile.TarError as exc:
        raise RefreshError(f"not a package tarball: {exc}") from exc


def _extract(archive: tarfile.TarFile) -> dict[str, bytes]:
    names = set(archive.getnames())
    for layout in LAYOUTS:
        if not set(layout.values()) <= names:
            continue
        found: dict[str, bytes] = {}
        for target, member in layout.items():
            handle = archive.extractfile(member)
            if handle is None:
                raise RefreshError(f"{member} in the tarball is not a file")
            data = handle.read()
            _check_schema(member, data)
            found[target] = data
        return found
    raise RefreshError(
        "the package carries no stable + unstable ACP schema pair at "
        + " or ".join(" + ".join(layout.values()) for layout in LAYOUTS)
    )


def _check_schema(member: str, data: bytes) -> None:
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise RefreshError(f"{member} is not JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("$defs"), dict):
        raise RefreshError(f"{member} is not a JSON Schema with $defs")


def write_schemas(files: dict[str, bytes], out: Path) -> list[str]:
    """Write every file into `out`; one line per file (name, size, sha256) for the log."""
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, data in sorted(files.items()):
        (out / name).write_bytes(data)
        lines.append(f"{name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="latest", help="package version or dist-tag")
    parser.add_argument("--out", type=Path, default=OUT, help="directory to write into")
    args = parser.parse_args(argv)
    try:
        version, url = tarball_url(args.version)
        with urllib.request.urlopen(url, timeout=120) as response:
            files = extract_schemas(response.read())
    except (RefreshError, OSError) as exc:
        print(f"refresh_acp_schema: {exc}", file=sys.stderr)
        return 1
    print(f"{PACKAGE}@{version} ({url})")
    for line in write_schemas(files, args.out):
        print(f"  {line}")
    print("Update the version in tests/schema/README.md, then run the tests.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
