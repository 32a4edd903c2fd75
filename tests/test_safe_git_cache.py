"""defect's own git reads the configuration's key names once, and again as soon as a file
git reads changes.

`safe_git` caches the overrides a `git config --list` yields, keyed on the identity of every
configuration file git may read. Each case caches a listing (proved by counting the git
processes), then changes one file the way an attacker would hide it (same size, in place with
the old mtime put back, or replaced by a new inode) to define a clean filter a
`.gitattributes` already names, and makes a tracked file's stat data stale so that `git
status` must read it through that filter. defect's next `git status` runs no filter; plain
git, after it, does (the case is live). The same for a repository git stops using (a nested
one losing its `HEAD`), an include (never cached), a file changed just now (not cached), and
the cache's bound.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from defect_core import safe_git
from defect_core.safe_git import run_git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

RACY_NS = 50_000_000
"""The racy window the tests run with (the default is 2 s), so that a file written by the
test can be cached after a short wait."""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=_clean_env(), check=True, capture_output=True)


@dataclass
class Rig:
    root: Path
    repo: Path
    home: Path
    marker: Path
    mark_cat: str
    listings: list[Path]
    tree: Path
    """The work tree whose tracked file `stale` touches."""

    def disarmed(self, section: str = "filtex") -> str:
        """A configuration text defining the driver under `section`: `filter` arms it, the
        same-size `filtex` defines nothing git runs."""
        return f'[{section} "evil"]\n\tclean = {self.mark_cat}\n\trequired = true\n'

    def commented(self) -> str:
        """The armed text with every line commented out: the same size, no key at all."""
        return "".join("#" + line[1:] for line in self.disarmed("filter").splitlines(True))

    def stale(self) -> None:
        """The tracked file's stat data no longer matches the index: status reads it again."""
        os.utime(self.tree / "tracked.txt", (1, 1))

    def settle(self, *paths: Path) -> None:
        """Wait until `paths` changed longer ago than the racy window."""
        newest = max(max(p.stat().st_ctime_ns, p.stat().st_mtime_ns) for p in paths)
        while time.time_ns() < newest + 2 * RACY_NS:
            time.sleep(RACY_NS / 1e9)

    def status(self, cwd: Path | None = None) -> bytes:
        done = run_git(cwd or self.repo, "status", "--porcelain", timeout=10)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def assert_live(self, cwd: Path | None = None) -> None:
        """Plain git runs the filter: the case could have failed."""
        assert not self.marker.exists()
        self.stale()
        subprocess.run(["git", "status"], cwd=cwd or self.repo, env=_clean_env(), check=False)
        assert self.marker.exists()


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setattr(safe_git, "RACY_NS", RACY_NS)
    marker = tmp_path / "MARKER"
    mark_cat = tmp_path / "mark-cat"
    mark_cat.write_text(f"#!/bin/sh\ntouch '{marker}'\nexec cat \"$@\"\n")
    mark_cat.chmod(0o755)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "T")
    git(repo, "config", "user.email", "t@example.invalid")
    (repo / "tracked.txt").write_text("tracked, committed\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "First commit")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    listings: list[Path] = []
    run = safe_git._run

    def counting(args: Sequence[str], *rest: Any, **kw: Any) -> Any:
        if list(args[:2]) == ["config", "--list"]:
            listings.append(Path(rest[1]))
        return run(args, *rest, **kw)

    monkeypatch.setattr(safe_git, "_run", counting)
    safe_git.clear_listing_cache()
    yield Rig(tmp_path, repo, home, marker, str(mark_cat), listings, repo)
    safe_git.clear_listing_cache()


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def _rewrite(path: Path, old: str, new: str, how: str) -> None:
    """Replace `old` by `new` (the same size) in `path`: in place with the old mtime put
    back, or as a new file renamed over it."""
    text = path.read_text()
    assert old in text and len(old.encode()) == len(new.encode())
    changed = text.replace(old, new)
    if how == "in place":
        st = path.stat()
        with open(path, "r+") as f:
            f.write(changed)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_size == st.st_size and path.stat().st_ino == st.st_ino
    else:
        fresh = path.with_name(path.name + ".new")
        fresh.write_text(changed)
        fresh.replace(path)


def _config_of(rig: Rig, where: str) -> tuple[Path, Path]:
    """The file the driver goes into, and the directory defect runs git in."""
    if where == "repository":
        return rig.repo / ".git" / "config", rig.repo
    if where == "global":
        return rig.home / ".gitconfig", rig.repo
    if where == "xdg":
        return rig.home / ".config" / "git" / "config", rig.repo
    worktree = rig.root / "linked"
    git(rig.repo, "worktree", "add", "-q", str(worktree))
    (worktree / ".gitattributes").write_text("* filter=evil\n")
    rig.tree = worktree
    return rig.repo / ".git" / "config", worktree


@pytest.mark.parametrize("how", ["in place", "replaced"])
@pytest.mark.parametrize("where", ["repository", "global", "xdg", "worktree"])
def test_a_driver_defined_after_a_cached_listing_is_overridden_on_the_next_call(
    rig: Rig, where: str, how: str
) -> None:
    config, cwd = _config_of(rig, where)
    _append(config, rig.disarmed())
    rig.settle(config, *config.parent.iterdir())
    rig.status(cwd)
    rig.status(cwd)
    assert len(rig.listings) == 1  # the second call used the cache

    _rewrite(config, "[filtex", "[filter", how)
    rig.stale()
    rig.status(cwd)
    assert len(rig.listings) == 2  # the change was seen
    assert not rig.marker.exists()
    rig.assert_live(cwd)


@pytest.mark.parametrize("include", ["include.path", "includeIf.onbranch:main.path"])
def test_an_include_keeps_the_listing_out_of_the_cache(rig: Rig, include: str) -> None:
    """Even an included file that holds no key yet (so git names it nowhere) is read again:
    an include keeps the listing out of the cache."""
    included = rig.root / "included.gitconfig"
    included.write_text(rig.commented())
    git(rig.repo, "config", include, str(included))
    rig.settle(included, rig.repo / ".git" / "config")
    rig.status()
    rig.status()
    assert len(rig.listings) == 2  # listed each time

    _rewrite(included, rig.commented(), rig.disarmed("filter"), "in place")
    rig.stale()
    rig.status()
    assert not rig.marker.exists()
    rig.assert_live()


def test_a_configuration_changed_just_now_is_not_cached(rig: Rig) -> None:
    for _ in range(3):
        _append(rig.repo / ".git" / "config", "\n")
        rig.status()
    assert len(rig.listings) == 3


def test_a_nested_repository_losing_its_head_hands_over_to_the_outer_ones_drivers(
    rig: Rig,
) -> None:
    """git stops using an inner repository that is no longer valid and walks up: the
    outer repository's driver must then be overridden, though no configuration changed."""
    _append(rig.repo / ".git" / "config", rig.disarmed("filter"))
    inner = rig.repo / "inner"
    inner.mkdir()
    git(inner, "init", "-q", "-b", "main")
    rig.settle(*(inner / ".git").iterdir(), *(rig.repo / ".git").iterdir(), inner / ".git")
    rig.status(inner)
    rig.status(inner)
    assert len(rig.listings) == 1

    (inner / ".git" / "HEAD").unlink()
    rig.stale()
    rig.status(inner)
    assert len(rig.listings) == 2
    assert not rig.marker.exists()
    rig.assert_live(inner)


def test_the_cache_is_bounded(rig: Rig) -> None:
    rig.settle(*(rig.repo / ".git").iterdir(), rig.repo / ".git")
    for i in range(safe_git.CACHE_ENTRIES + 4):
        sub = rig.repo / f"d{i}"
        sub.mkdir()
        rig.status(sub)
    assert len(safe_git._cache) == safe_git.CACHE_ENTRIES
    rig.status(rig.repo / f"d{safe_git.CACHE_ENTRIES + 3}")  # the newest is kept
    assert len(rig.listings) == safe_git.CACHE_ENTRIES + 4


def test_another_global_file_named_by_the_environment_is_listed(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GIT_CONFIG_GLOBAL` (kept: it only names the user's file) chooses another file: the
    cached listing of the first is not reused."""
    first, second = rig.root / "first.gitconfig", rig.root / "second.gitconfig"
    first.write_text(rig.disarmed())
    second.write_text(rig.disarmed("filter"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(first))
    rig.settle(first, second, *(rig.repo / ".git").iterdir())
    rig.status()
    rig.status()
    assert len(rig.listings) == 1

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(second))
    rig.stale()
    rig.status()
    assert len(rig.listings) == 2
    assert not rig.marker.exists()
    rig.stale()
    subprocess.run(["git", "status"], cwd=rig.repo, env=dict(os.environ), check=False)
    assert rig.marker.exists()
