"""What a checkpoint is: the prior state of every file one prompt changed, and its state after.

Owns `FileState` (a file's content by blob name and mode, a symbolic link's target, "absent"
— with how many directories on its way were absent too, which defect then made and a restore
may remove again —, or "uncovered" with the reason it could not be captured), `Entry` (one
path: its state before the turn, and the state defect left after it), `Checkpoint` (one
prompt of one session), and their JSON form, which is what the store persists beside the
session.

Invariants:
- Paths are relative to the checkpoint's workspace root, POSIX-style, never `..`-escaping: a
  checkpoint cannot name a file outside its workspace.
- `before` is the first state captured in the turn (first capture wins); `after` is None
  until the turn finished (a turn cut short by a crash), which a restore treats as unknown.
- `to_json` / `from_json` round-trip exactly, and `from_json` refuses a malformed record
  with `ValueError` instead of guessing.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Literal

StateKind = Literal["file", "symlink", "absent", "uncovered"]
Source = Literal["tool", "bash", "restore"]
FORMAT = 1


@dataclass(frozen=True, slots=True)
class FileState:
    """One path's state. `digest` names the content (a blob, for a `before` state; only a
    hash, for an `after` state); `mode` is the permission bits of a file; `dirs`, for an
    absent path, how many of the directories just above it were absent too (None: unknown,
    a record from before it was kept)."""

    kind: StateKind
    digest: str | None = None
    size: int | None = None
    mode: int | None = None
    target: str | None = None
    reason: str | None = None
    dirs: int | None = None

    @staticmethod
    def absent(dirs: int | None = None) -> FileState:
        return FileState("absent", dirs=dirs or None)

    @staticmethod
    def uncovered(reason: str) -> FileState:
        return FileState("uncovered", reason=reason)

    def same_content(self, other: FileState) -> bool:
        """Same file content (or link target, or absence); the mode is not compared."""
        if self.kind != other.kind or self.kind == "uncovered":
            return False
        if self.kind == "file":
            return self.digest == other.digest
        return self.target == other.target

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for key in ("digest", "size", "mode", "target", "reason", "dirs"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @staticmethod
    def from_json(raw: Any) -> FileState:
        if not isinstance(raw, dict) or raw.get("kind") not in (
            "file",
            "symlink",
            "absent",
            "uncovered",
        ):
            raise ValueError(f"not a file state: {raw!r}")
        state = FileState(
            raw["kind"],
            digest=_opt(raw, "digest", str),
            size=_opt(raw, "size", int),
            mode=_opt(raw, "mode", int),
            target=_opt(raw, "target", str),
            reason=_opt(raw, "reason", str),
            dirs=_opt(raw, "dirs", int),
        )
        if state.kind == "file" and state.digest is None:
            raise ValueError("a file state needs a digest")
        if state.kind == "symlink" and state.target is None:
            raise ValueError("a symlink state needs a target")
        if state.dirs is not None and (state.kind != "absent" or state.dirs < 1):
            raise ValueError(f"absent directories only for an absent path: {raw!r}")
        return state


def _opt(raw: dict[str, Any], key: str, kind: type) -> Any:
    value = raw.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise ValueError(f"{key}: expected {kind.__name__}, got {value!r}")
    return value


def check_relative(path: str) -> str:
    """`path` if it is a clean relative POSIX path inside the root, else ValueError."""
    norm = posixpath.normpath(path)
    if not path or path.startswith("/") or norm != path or norm == ".." or norm.startswith("../"):
        raise ValueError(f"not a path inside the workspace: {path!r}")
    return path


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    before: FileState
    after: FileState | None = None
    source: Source = "tool"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "before": self.before.to_json(),
            "source": self.source,
        }
        if self.after is not None:
            out["after"] = self.after.to_json()
        return out

    @staticmethod
    def from_json(raw: Any) -> Entry:
        if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
            raise ValueError(f"not a checkpoint entry: {raw!r}")
        source = raw.get("source", "tool")
        if source not in ("tool", "bash", "restore"):
            raise ValueError(f"unknown entry source {source!r}")
        after = raw.get("after")
        return Entry(
            check_relative(raw["path"]),
            FileState.from_json(raw.get("before")),
            None if after is None else FileState.from_json(after),
            source,
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The files one prompt (turn) changed, with their prior states.

    `notes` say what the checkpoint does not cover (command side effects outside a git work
    tree, files over the capture budget), for the rewind preview."""

    turn_id: str
    root: str
    created_at: float
    entries: tuple[Entry, ...] = ()
    notes: tuple[str, ...] = ()
    finished: bool = True
    session_id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def paths(self) -> list[str]:
        return [e.path for e in self.entries]

    def blob_digests(self) -> set[str]:
        """The blobs this checkpoint needs to restore (its `before` contents)."""
        return {
            e.before.digest for e in self.entries if e.before.kind == "file" and e.before.digest
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "turn_id": self.turn_id,
            "session_id": self.session_id,
            "root": self.root,
            "created_at": self.created_at,
            "finished": self.finished,
            "entries": [e.to_json() for e in self.entries],
            "notes": list(self.notes),
            "meta": self.meta,
        }

    @staticmethod
    def from_json(raw: Any) -> Checkpoint:
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise ValueError("not a checkpoint record (or of an unknown format)")
        turn_id, root, created = raw.get("turn_id"), raw.get("root"), raw.get("created_at")
        if not isinstance(turn_id, str) or not isinstance(root, str):
            raise ValueError("a checkpoint needs a turn id and a root")
        if not isinstance(created, int | float) or isinstance(created, bool):
            raise ValueError("a checkpoint needs a creation time")
        entries, notes = raw.get("entries", []), raw.get("notes", [])
        if not isinstance(entries, list) or not isinstance(notes, list):
            raise ValueError("checkpoint entries and notes must be lists")
        if not all(isinstance(n, str) for n in notes):
            raise ValueError("checkpoint notes must be strings")
        meta = raw.get("meta", {})
        return Checkpoint(
            turn_id,
            root,
            float(created),
            tuple(Entry.from_json(e) for e in entries),
            tuple(notes),
            bool(raw.get("finished", True)),
            str(raw.get("session_id", "")),
            meta if isinstance(meta, dict) else {},
        )
