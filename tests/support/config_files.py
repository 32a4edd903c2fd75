"""pytest fixtures and helpers for the configuration's files: a home, a repository, a file.

Owns `home` (an empty home directory) and `repo` (a git work tree with its `.defect/`
directory and a nested `src/pkg/` to start from below the root), loaded for every test from
`tests/conftest.py` (`pytest_plugins`), and the helpers `write` (a file, its directories
made) and `user_file` (the user's `config.toml` under `home`), imported where used.

Invariant: each test gets its own fresh directories under its `tmp_path`; nothing is shared
between tests.

Why: the configuration tests (tests/test_config.py, tests/test_config_hooks.py,
tests/test_config_trust.py) lay out the same files; one definition keeps their layouts the
same. A module that needs another layout defines its own fixture of that name, which takes
precedence over this one.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty home directory (give it as `HOME` in the environment a test loads with)."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository root: `.git/`, `.defect/` and an empty `src/pkg/` below it."""
    path = tmp_path / "repo"
    (path / ".git").mkdir(parents=True)
    (path / ".defect").mkdir()
    (path / "src" / "pkg").mkdir(parents=True)
    return path


def write(path: Path, text: str) -> Path:
    """`text` written to `path` (UTF-8), its directories made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def user_file(home: Path, text: str) -> Path:
    """The user's configuration file under `home`, holding `text`."""
    return write(home / ".config" / "defect" / "config.toml", text)
