"""defect's ACP registry entry (`agent.json`) and the checks a release must pass.

The manifest is validated against the registry's own schema, vendored in
`tests/schema/registry/` (a schema that does not load fails here, never skips); the registry
CI's further rules (`scripts/registry_check.py`: icon, exact version pin, auth methods) and
the release gate (`scripts/release_check.py`: one version everywhere) are each shown to
pass on this tree and to fail, with a one-line reason, on a tree or value made wrong. The
checks of the installed agent itself are in `tests/test_install.py`.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from scripts import refresh_registry_schema, registry_check, release_check
from tests.support.acp_harness import REPO

MANIFEST: dict[str, Any] = json.loads((REPO / "agent.json").read_text(encoding="utf-8"))
SCHEMA: dict[str, Any] = json.loads(registry_check.REGISTRY_SCHEMA.read_text(encoding="utf-8"))


def test_agent_json_is_a_valid_registry_entry() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    jsonschema.validate(MANIFEST, SCHEMA)
    assert registry_check.check_manifest(REPO) == []
    version = release_check.package_version(REPO)
    assert MANIFEST["id"] == "defect"
    assert MANIFEST["version"] == version
    assert MANIFEST["distribution"] == {"uvx": {"package": f"defect=={version}", "args": ["acp"]}}


def test_the_manifest_names_the_repository_of_pyproject() -> None:
    from tests.support.doc_checks import repository_url

    assert MANIFEST["repository"] == repository_url()


def test_a_schema_that_does_not_load_fails() -> None:
    with pytest.raises(registry_check.CheckError, match="not a valid JSON Schema"):
        registry_check.manifest_problems(MANIFEST, {**SCHEMA, "type": 12})
    with pytest.raises(registry_check.CheckError, match="cannot be read as JSON"):
        registry_check.load_json(REPO / "README.md")


def test_the_registry_rules_find_each_mistake() -> None:
    wrong = copy.deepcopy(MANIFEST)
    wrong["id"] = "Defect"
    del wrong["description"]
    problems = registry_check.manifest_problems(wrong, SCHEMA)
    assert any("'description' is a required property" in p for p in problems), problems
    assert any(p.startswith("agent.json: id: 'Defect' does not match") for p in problems)
    unpinned = copy.deepcopy(MANIFEST)
    unpinned["distribution"]["uvx"]["package"] = "defect"
    assert registry_check.manifest_problems(unpinned, SCHEMA) == [
        "agent.json: uvx package 'defect' pins no exact version"
    ]
    other = copy.deepcopy(MANIFEST)
    other["distribution"]["uvx"]["package"] = "defect==9.9.9"
    assert registry_check.manifest_problems(other, SCHEMA) == [
        f"agent.json: uvx package pins 9.9.9, the entry says {MANIFEST['version']}"
    ]
    other["distribution"] = {"npx": {"package": "@scope/defect@9.9.9"}}
    assert registry_check.manifest_problems(other, SCHEMA) == [
        f"agent.json: npx package pins 9.9.9, the entry says {MANIFEST['version']}"
    ]


def test_the_icon_rules() -> None:
    icon = (REPO / "icon.svg").read_text(encoding="utf-8")
    assert registry_check.icon_problems(icon) == []
    big = icon.replace('width="16" height="16"', 'width="32" height="24"')
    assert registry_check.icon_problems(big) == ["icon.svg: 32x24, the registry wants 16x16"]
    red = icon.replace('stroke="currentColor"', 'stroke="#ff0000"')
    assert registry_check.icon_problems(red) == [
        "icon.svg: hard-coded colour '#ff0000' (use currentColor)",
        "icon.svg: never uses currentColor, so it cannot follow the theme",
    ]
    styled = '<svg viewBox="0 0 16 16"><path style="fill: blue" stroke="currentColor"/></svg>'
    assert registry_check.icon_problems(styled) == [
        "icon.svg: hard-coded colour 'blue' (use currentColor)"
    ]


def test_auth_methods_are_read_as_the_registry_reads_them() -> None:
    assert registry_check.auth_type({"id": "a", "name": "A"}) == "agent"
    assert registry_check.auth_type({"id": "t", "name": "T", "type": "terminal"}) == "terminal"
    assert registry_check.auth_type({"id": "m", "name": "M", "_meta": {"terminal-auth": {}}}) == (
        "terminal"
    )
    assert registry_check.auth_type({"id": "e", "name": "E", "type": "env_var"}) == "env_var"
    for methods in ([], [{"id": "e", "name": "E", "type": "env_var"}]):
        (problem,) = registry_check.auth_problems({"authMethods": methods}, "defect", REPO)
        assert "offers no Agent or Terminal method" in problem
    agent_only = {"authMethods": [{"id": "a", "name": "A"}]}
    assert registry_check.auth_problems(agent_only, "/nonexistent/defect", REPO) == []


def test_an_initialize_result_is_checked_against_the_acp_schema() -> None:
    acp = registry_check.load_json(registry_check.ACP_SCHEMA)
    good = {"protocolVersion": 1, "authMethods": [{"id": "login", "name": "Log in"}]}
    assert registry_check.schema_problems(good, acp) == []
    bad = {"protocolVersion": "one", "authMethods": [{"name": "no id"}]}
    problems = registry_check.schema_problems(bad, acp)
    assert any(p.startswith("initialize: protocolVersion:") for p in problems), problems
    assert any(p.startswith("initialize: authMethods.0:") for p in problems), problems


def tree_copy(tmp_path: Path) -> Path:
    root = tmp_path / "defect"
    root.mkdir()
    for name in ("pyproject.toml", "agent.json", "icon.svg"):
        shutil.copy(REPO / name, root / name)
    (root / "defect_core").mkdir()
    shutil.copy(REPO / "defect_core" / "__init__.py", root / "defect_core" / "__init__.py")
    return root


def test_release_check_refuses_a_manifest_of_another_version(tmp_path: Path) -> None:
    root = tree_copy(tmp_path)
    assert release_check.version_problems(root) == []
    manifest = json.loads((root / "agent.json").read_text(encoding="utf-8"))
    manifest["version"] = "9.9.9"
    (root / "agent.json").write_text(json.dumps(manifest), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, REPO / "scripts" / "release_check.py", "--root", root, "--no-registry"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    version = release_check.package_version(REPO)
    assert done.stderr.splitlines() == [
        f"release_check: agent.json: version '9.9.9' differs from the package version "
        f"'{version}' (defect_core.__version__)",
        f"release_check: agent.json: uvx package pins {version}, the entry says 9.9.9",
    ]
    assert "built" not in done.stdout


def test_release_check_refuses_a_second_version_in_pyproject(tmp_path: Path) -> None:
    root = tree_copy(tmp_path)
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    (root / "pyproject.toml").write_text(
        pyproject.replace('dynamic = ["version"]', 'version = "0.0.1"'), encoding="utf-8"
    )
    (problem,) = release_check.version_problems(root)
    assert "a static version '0.0.1'" in problem


def test_the_refresh_accepts_only_an_entry_schema() -> None:
    data = registry_check.REGISTRY_SCHEMA.read_bytes()
    assert refresh_registry_schema.check_schema(data)["title"] == "ACP Agent"
    for bad in (b"<html>", b"[]", json.dumps({"type": "object", "required": ["id"]}).encode()):
        with pytest.raises(refresh_registry_schema.RefreshError):
            refresh_registry_schema.check_schema(bad)
    assert refresh_registry_schema.source_url("abc123").endswith("/abc123/agent.schema.json")


def test_registry_check_stops_at_a_manifest_the_registry_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tree_copy(tmp_path)
    manifest = copy.deepcopy(MANIFEST)
    manifest["distribution"] = {"npx": {"package": f"defect@{MANIFEST['version']}"}}
    (root / "agent.json").write_text(json.dumps(manifest), encoding="utf-8")
    # The agent is never started: the program named does not exist.
    assert registry_check.main(["--program", "/nonexistent/defect", "--root", str(root)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "registry_check: agent.json: no distribution.uvx, the way defect is listed"
    ]
