"""defect as a user installs it: a wheel in a fresh venv, and `uv tool install`.

A wheel is built once per session and installed into a fresh virtual environment whose only
extra path is the test run's own site-packages (for the dependencies, so no index is needed;
its `.pth` files — the editable install of this checkout among them — are not processed, so
`defect_*` and `tests` can only come from the wheel); the commands then run from that
install, outside the checkout, so an import of `tests.*` or of a module the wheel does not
ship fails here. `defect transcript run` of
`provider_fake.jsonl` proves the fake API (`defect fake-api`) ships with it. The README's
`uv tool install` quick start is followed too, with uv's directories in a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.acp_harness import REPO

pytestmark = pytest.mark.slow


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
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-w",
        out,
        REPO,
        cwd=out,
    )
    assert built.returncode == 0, built.stderr
    shutil.rmtree(REPO / "build", ignore_errors=True)
    (wheel_file,) = out.glob("defect-*.whl")
    return wheel_file


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


def test_the_wheel_ships_no_tests_and_the_fake_api(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("tests/")]
    assert "defect_fakeapi/server.py" in names
    assert any(n.endswith("licenses/LICENSE") for n in names)


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


def test_readme_quick_start_with_uv_tool_install(tmp_path: Path) -> None:
    tools = tmp_path / "uv-venv"
    venv.create(tools, system_site_packages=True, with_pip=True)
    got = run(tools / "bin" / "python", "-m", "pip", "install", "-q", "uv", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    env = {
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
        "UV_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = run(tools / "bin" / "uv", "tool", "install", REPO, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    version = run(tmp_path / "bin" / "defect", "--version", cwd=tmp_path)
    assert version.stdout.startswith("defect "), version.stderr
