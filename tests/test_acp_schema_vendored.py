"""The vendored ACP schema and the script that refreshes it.

The tests validate every agent message against `tests/schema/`, so the repository must carry
the schema itself (a clone runs its tests with nothing beside it) and its refresh script must
take exactly the two schema files out of an npm package tarball — tested here on tarballs the
test builds, never on the network.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from scripts.refresh_acp_schema import RefreshError, extract_schemas, main, write_schemas
from tests.support.acp_harness import REPO
from tests.support.acp_schema import SCHEMA_DIR, AcpSchema, schema_path

STABLE = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": {"A": {}}}
UNSTABLE = {"$defs": {"A": {}, "B": {"type": "string"}}}


def tarball(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def dumps(value: object) -> bytes:
    return json.dumps(value).encode()


def test_the_schema_is_read_from_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACP_SCHEMA", raising=False)
    path = schema_path()
    assert path == REPO / "tests" / "schema" / "schema.v1.json"
    assert path.is_relative_to(REPO)
    schema = AcpSchema(path)
    assert "SessionNotification" in schema.document["$defs"]
    unstable = json.loads((SCHEMA_DIR / "schema.v1.unstable.json").read_text())
    assert set(schema.document["$defs"]) < set(unstable["$defs"])


def test_the_acp_schema_variable_still_overrides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "schema.json"
    monkeypatch.setenv("ACP_SCHEMA", str(elsewhere))
    assert schema_path() == elsewhere


def test_extracts_both_files_from_a_2x_package() -> None:
    files = extract_schemas(
        tarball(
            {
                "package/package.json": b"{}",
                "package/schema/v1/schema.json": dumps(STABLE),
                "package/schema/v1/schema.unstable.json": dumps(UNSTABLE),
                "package/schema/v2/schema.json": dumps({"$defs": {"V2": {}}}),
            }
        )
    )
    assert files == {
        "schema.v1.json": dumps(STABLE),
        "schema.v1.unstable.json": dumps(UNSTABLE),
    }


def test_extracts_the_older_flat_layout() -> None:
    files = extract_schemas(
        tarball(
            {
                "package/schema/schema.json": dumps(STABLE),
                "package/schema/schema.unstable.json": dumps(UNSTABLE),
            }
        )
    )
    assert json.loads(files["schema.v1.unstable.json"]) == UNSTABLE


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ({"package/package.json": b"{}"}, "carries no stable"),
        ({"package/schema/v1/schema.json": dumps(STABLE)}, "carries no stable"),
        (
            {
                "package/schema/v1/schema.json": b"{not json",
                "package/schema/v1/schema.unstable.json": dumps(UNSTABLE),
            },
            "is not JSON",
        ),
        (
            {
                "package/schema/v1/schema.json": dumps(STABLE),
                "package/schema/v1/schema.unstable.json": dumps({"title": "x"}),
            },
            "with $defs",
        ),
    ],
)
def test_a_package_without_a_usable_schema_is_refused(
    members: dict[str, bytes], error: str
) -> None:
    with pytest.raises(RefreshError, match=error.replace("$", r"\$")):
        extract_schemas(tarball(members))


def test_not_a_tarball_is_refused() -> None:
    with pytest.raises(RefreshError, match="not a package tarball"):
        extract_schemas(b"<html>rate limited</html>")


def test_writes_the_files_and_reports_their_digests(tmp_path: Path) -> None:
    out = tmp_path / "schema"
    lines = write_schemas({"schema.v1.json": dumps(STABLE)}, out)
    assert (out / "schema.v1.json").read_bytes() == dumps(STABLE)
    assert lines[0].startswith(f"schema.v1.json: {len(dumps(STABLE))} bytes, sha256 ")


def test_a_failed_refresh_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_network(version: str) -> tuple[str, str]:
        raise OSError("network is unreachable")

    monkeypatch.setattr("scripts.refresh_acp_schema.tarball_url", no_network)
    assert main(["--out", str(tmp_path / "schema")]) == 1
    assert "network is unreachable" in capsys.readouterr().err
    assert not (tmp_path / "schema").exists()
