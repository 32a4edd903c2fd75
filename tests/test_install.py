"""defect as a user installs it: sdist and wheel, pip, uvx, pipx, `uv tool install`.

Built once per session the way an index would (`python -m build` on a copy of the tree: the
sdist, then the wheel from the sdist, by `scripts/release_check.py`), then installed the
ways a user does, each outside the checkout, so an import of `tests.*` or of a module the
wheel does not ship fails here:

- into a fresh venv whose only extra path is the test run's own site-packages (for the
  dependencies; its `.pth` files — the editable install of this checkout among them — are not
  processed, so `defect_*` can only come from the wheel); `defect transcript run` of
  `provider_fake.jsonl` proves the fake API (`defect fake-api`) ships with it;
- the ACP registry's command, `uvx defect==X.Y.Z acp` as `agent.json` says, and
  `uvx --from <wheel>`; `pipx install`; the README's `uv tool install`; the sdist with pip;
- `scripts/registry_check.py` on the installed agent, as the registry's CI checks it.

Offline but for one step: the session's wheelhouse (`pip wheel` of the dependencies, the
build backend, uv and pipx) is the only thing fetched from an index; every build and install
after it runs with `--no-index` against it and the built wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import registry_check, release_check
from tests.support.acp_harness import REPO

pytestmark = pytest.mark.slow

VERSION = release_check.package_version(REPO)


def run(*args: str | Path, cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(kwargs.pop("env", {}))  # type: ignore[arg-type]
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of every dependency, the build backend, uv and pipx: the one online step."""
    out = tmp_path_factory.mktemp("wheelhouse")
    with (REPO / "pyproject.toml").open("rb") as handle:
        pyproject = tomllib.load(handle)
    wanted = [
        *pyproject["project"]["dependencies"],
        *pyproject["build-system"]["requires"],
        "uv",
        "pipx",
    ]
    got = run(sys.executable, "-m", "pip", "wheel", "-q", "-w", out, *wanted, cwd=out)
    assert got.returncode == 0, got.stderr
    return out


def offline(wheelhouse: Path) -> dict[str, str]:
    """pip's environment for an install from the wheelhouse alone."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}


@pytest.fixture(scope="session")
def dist(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> release_check.Artefacts:
    """The sdist and the wheel built from it; the wheel joins the wheelhouse (an index)."""
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    built = release_check.build_artefacts(REPO, out, {**env, **offline(wheelhouse)})
    shutil.copy(built.wheel, wheelhouse)
    return built


@pytest.fixture(scope="session")
def wheel(dist: release_check.Artefacts) -> Path:
    return dist.wheel


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The `bin/` of a fresh venv with the wheel installed."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False)
    (site,) = (root / "lib").glob("python3*/site-packages")
    (site / "defect-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        root / "bin" / "python",
        "install",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    yield root / "bin"


@pytest.fixture(scope="session")
def tools(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin/` of a venv holding uv and pipx, installed from the wheelhouse."""
    root = tmp_path_factory.mktemp("tools")
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    done = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "uv",
        "pipx",
        cwd=root,
        env=offline(wheelhouse),
    )
    assert done.returncode == 0, done.stderr
    return root / "bin"


def uv_env(root: Path, tools: Path) -> dict[str, str]:
    """uv's directories under `root` but its cache (the session's, beside the tools), and no
    interpreter download, nor any uv.toml of the machine."""
    return {
        "UV_CACHE_DIR": str(tools.parent / "uv-cache"),
        "UV_TOOL_DIR": str(root / "uv-tools"),
        "UV_TOOL_BIN_DIR": str(root / "uv-bin"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_CONFIG": "1",
    }


def answers_initialize(command: list[str], home: Path, env: dict[str, str] | None = None) -> None:
    """`command` is an ACP agent of this version: the registry's `initialize` is answered."""
    result = registry_check.initialize(command, home, env)
    assert result["protocolVersion"] == 1, result
    assert result["agentInfo"]["version"] == VERSION, result


def test_the_wheel_ships_no_tests_and_the_fake_api(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("tests/")]
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.startswith("defect_")} == {f"defect-{VERSION}.dist-info"}
    assert {"defect_core", "defect_acp", "defect_cli", "defect_fakeapi"} <= tops
    assert "defect_fakeapi/server.py" in names
    assert any(n.endswith("licenses/LICENSE") for n in names)


def test_the_sdist_carries_what_building_and_testing_need(
    dist: release_check.Artefacts,
) -> None:
    with tarfile.open(dist.sdist) as sdist:
        names = {name.split("/", 1)[-1] for name in sdist.getnames()}
    for needed in (
        *release_check.SDIST_NEEDS,
        "MANIFEST.in",
        "icon.svg",
        "defect_fakeapi/server.py",
        "tests/conftest.py",
        "tests/support/acp_harness.py",
        "tests/schema/schema.v1.json",
        "tests/schema/registry/agent.schema.json",
        "tests/transcripts/provider_fake.jsonl",
        "scripts/registry_check.py",
        "docs/editors.md",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_twine_check_passes_on_both_artefacts(dist: release_check.Artefacts) -> None:
    assert release_check.artefact_problems(dist, VERSION) == []


def test_version_from_the_install(installed: Path, tmp_path: Path) -> None:
    done = run(installed / "defect", "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("defect ")
    for package in ("defect_cli", "defect_acp"):
        where = run(
            installed / "python", "-c", f"import {package}; print({package}.__file__)", cwd=tmp_path
        )
        assert where.returncode == 0, where.stderr
        assert not where.stdout.strip().startswith(str(REPO)), where.stdout


def test_acp_answers_initialize_and_session_new_from_the_install(
    installed: Path, tmp_path: Path
) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": str(tmp_path), "mcpServers": []},
        },
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEFECT_", "PYTHONPATH"))}
    env["DEFECT_STATE_DIR"] = str(tmp_path / "state")
    with subprocess.Popen(
        [str(installed / "defect"), "acp"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as agent:
        assert agent.stdin is not None and agent.stdout is not None
        answers = {}
        for message in lines:
            agent.stdin.write(json.dumps(message) + "\n")
            agent.stdin.flush()
            answer = json.loads(agent.stdout.readline())
            answers[answer["id"]] = answer
        agent.stdin.close()
        assert agent.wait(timeout=30) == 0
    assert answers[1]["result"]["protocolVersion"] == 1, answers
    assert answers[2]["result"]["sessionId"], answers


def test_transcript_with_the_fake_api_from_the_install(installed: Path, tmp_path: Path) -> None:
    transcript = REPO / "tests" / "transcripts" / "provider_fake.jsonl"
    done = run(installed / "defect", "transcript", "run", transcript, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 0 failed, 0 skipped" in done.stdout, done.stdout


def test_the_registry_command_through_uvx(
    tools: Path, dist: release_check.Artefacts, wheelhouse: Path, tmp_path: Path
) -> None:
    manifest = json.loads((REPO / "agent.json").read_text(encoding="utf-8"))
    uvx = manifest["distribution"]["uvx"]
    offline_uv = ["--offline", "--no-index", "--find-links", str(wheelhouse)]
    base = [str(tools / "uvx"), *offline_uv, "--python", sys.executable]
    env = uv_env(tmp_path, tools)
    # What the registry runs: `uvx defect==X.Y.Z acp`, the built wheel as the index's.
    answers_initialize([*base, uvx["package"], *uvx["args"]], tmp_path, env)
    wheel = next(wheelhouse.glob(f"defect-{VERSION}-*.whl"))
    answers_initialize([*base, "--from", str(wheel), "defect", "acp"], tmp_path, env)


def test_pipx_install_then_help_and_acp(
    tools: Path, wheel: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    env = {
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "pipx-bin"),
        "PIPX_MAN_DIR": str(tmp_path / "pipx-man"),
        **offline(wheelhouse),
    }
    done = run(tools / "pipx", "install", "--python", sys.executable, wheel, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    defect = tmp_path / "pipx-bin" / "defect"
    helped = run(defect, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "usage: defect" in helped.stdout, helped.stderr
    answers_initialize([str(defect), "acp"], tmp_path)


def test_readme_quick_start_with_uv_tool_install(
    tools: Path, dist: release_check.Artefacts, wheelhouse: Path, tmp_path: Path
) -> None:
    # `uv tool install defect`, the index being the wheelhouse that holds the built wheel.
    offline_uv = ["--offline", "--no-index", "--find-links", wheelhouse]
    done = run(
        tools / "uv",
        "tool",
        "install",
        *offline_uv,
        "--python",
        sys.executable,
        "defect",
        cwd=tmp_path,
        env=uv_env(tmp_path, tools),
    )
    assert done.returncode == 0, done.stderr
    version = run(tmp_path / "uv-bin" / "defect", "--version", cwd=tmp_path)
    assert version.stdout == f"defect {VERSION}\n", version.stderr


def test_the_sdist_installs_with_pip(
    dist: release_check.Artefacts, wheelhouse: Path, tmp_path: Path
) -> None:
    root = tmp_path / "venv"
    venv.create(root, with_pip=False)
    (site,) = (root / "lib").glob("python3*/site-packages")
    (site / "defect-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = root / "bin" / "python"
    done = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        dist.sdist,
        cwd=tmp_path,
        env=offline(wheelhouse),
    )
    assert done.returncode == 0, done.stderr
    version = run(root / "bin" / "defect", "--version", cwd=tmp_path)
    assert version.stdout == f"defect {VERSION}\n", version.stderr


def test_release_check_passes_on_this_tree(wheelhouse: Path, tmp_path: Path) -> None:
    done = run(
        sys.executable,
        REPO / "scripts" / "release_check.py",
        "--no-registry",
        "--out",
        tmp_path / "dist",
        cwd=tmp_path,
        env=offline(wheelhouse),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "twine check passed" in done.stdout


def test_a_terminal_auth_method_must_run(installed: Path, tmp_path: Path) -> None:
    defect = str(installed / "defect")
    runs = {"id": "login", "name": "Log in", "type": "terminal", "args": ["acp"]}
    broken = {**runs, "args": ["no-such-command"]}
    assert registry_check.auth_problems({"authMethods": [runs]}, defect, tmp_path) == []
    (problem,) = registry_check.auth_problems({"authMethods": [broken]}, defect, tmp_path)
    assert "`defect no-such-command --help` exits 2" in problem, problem


def test_the_registry_ci_check_passes_on_the_installed_agent(
    installed: Path, tmp_path: Path
) -> None:
    # What the registry's CI does with the installed agent: initialize (its own request),
    # valid against the ACP schema, with an Agent or Terminal method whose command runs.
    assert registry_check.check_agent(str(installed / "defect"), ["acp"], tmp_path) == []
    assert registry_check.main(["--program", str(installed / "defect")]) == 0
