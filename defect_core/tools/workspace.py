"""Where a built-in tool may reach, and how its arguments are let in.

Owns the workspace boundary (`resolve_path`), the project-relative names shown to people
(`display_path`), and the argument check every built-in tool starts with (`parse_args`).

Invariants:
- A path a tool hands to a backend went through `resolve_path` first: relative paths resolve
  against the session cwd, and the *real* path (symlinks followed, `..` collapsed) must lie
  inside the cwd's real path. Anything else is refused here, before any backend or editor
  call, so a delegated backend never even hears of it.
- Reads outside the workspace pass only when the session allows it
  (`ToolContext.allow_read_outside`); writes and working directories never do.
- The path returned keeps the workspace's own spelling (the cwd as the editor gave it), so
  locations and `fs/*` calls name files the way the editor knows them.
- A path longer than the system allows (`PATH_MAX`, or a name longer than `NAME_MAX`, as
  `os.pathconf` gives them for the workspace) is refused here, with one line, before anything
  is created: a write could otherwise make its directories one at a time beneath the root,
  then fail on the whole path and report a failure for something it did.

Why here and not in each tool: one boundary, one set of messages. The refusal names the path
as the model wrote it, relative to the project, and the workspace, so the model can correct
itself ("path is outside the workspace: ../x (workspace: /home/me/proj)").
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from defect_core.tools.base import ToolError


class OutsideWorkspace(ToolError):
    """The path resolves outside the session's workspace."""


def display_path(path: str | Path, cwd: Path) -> str:
    """`path` as a person reads it: relative to the project when inside it, else as is.

    Purely lexical (no file-system access), so `describe` can use it.
    """
    raw = os.fspath(path)
    if not raw:
        return raw
    full = os.path.normpath(os.path.join(cwd, os.path.expanduser(raw)))
    base = os.path.normpath(cwd)
    if full == base:
        return "."
    if full.startswith(base.rstrip(os.sep) + os.sep):
        return os.path.relpath(full, base)
    return full


class PathTooLong(ToolError):
    """The path is longer than the system allows."""


@functools.lru_cache(maxsize=64)
def path_limits(base: str) -> tuple[int, int]:
    """(the longest path, the longest name), in bytes, on the file system of `base`."""
    limits = []
    for name, default in (("PC_PATH_MAX", 4096), ("PC_NAME_MAX", 255)):
        try:
            value = os.pathconf(base, name)
        except (OSError, ValueError, AttributeError):
            value = default
        limits.append(value if value > 0 else default)
    return limits[0] - 1, limits[1]  # PATH_MAX counts the terminating NUL


def check_length(raw: str, path: str, cwd: Path) -> None:
    """`PathTooLong` when the absolute `path` (what `raw` names) is longer than the system
    allows, worded relative to the workspace and shortened to one line."""
    longest, longest_name = path_limits(os.path.abspath(cwd))
    size = len(os.fsencode(path))
    if size > longest:
        problem = f"{size} bytes, the limit is {longest}"
    else:
        name = max(path.split(os.sep), key=lambda part: len(os.fsencode(part)))
        named = len(os.fsencode(name))
        if named <= longest_name:
            return
        problem = f"a name of {named} bytes, the limit is {longest_name}"
    shown = " ".join(display_path(raw, cwd).split())
    if len(shown) > 80:
        shown = f"{shown[:60]}…{shown[-16:]}"
    raise PathTooLong(f"path is too long for this system: {shown} ({problem})")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_path(
    raw: str,
    cwd: Path,
    *,
    write: bool,
    allow_read_outside: bool = False,
) -> Path:
    """The absolute path `raw` names, if the tool may touch it; else `OutsideWorkspace` (or
    `PathTooLong`, past what the system allows: `check_length`).

    `write=True` for anything that changes the file system or runs there (writes, edits, a
    command's working directory): those never leave the workspace.
    """
    if not raw or not raw.strip():
        raise ToolError("path is empty")
    if "\x00" in raw:
        raise ToolError("path contains a NUL character")
    base = os.path.abspath(cwd)
    lexical = os.path.normpath(os.path.join(base, os.path.expanduser(raw)))
    check_length(raw, lexical, cwd)
    if not write and allow_read_outside:
        return Path(lexical)
    real_base = os.path.realpath(base)
    real = os.path.realpath(lexical)
    if _inside(lexical, base) and _inside(real, real_base):
        return Path(lexical)
    if _inside(real, real_base):
        # Spelled through another name of the workspace (e.g. /private/tmp vs /tmp): fine.
        check_length(raw, real, cwd)
        return Path(real)
    shown = raw
    if _inside(lexical, base) or _inside(lexical, real_base):
        shown = f"{display_path(raw, cwd)} -> {real}"
    action = (
        ""
        if write
        else " (reading outside it is off: the user can set allow_read_outside = true in "
        "~/.config/defect/config.toml)"
    )
    raise OutsideWorkspace(f"path is outside the workspace: {shown} (workspace: {base}){action}")


# --- arguments --------------------------------------------------------------------------------


class ToolArgs(BaseModel):
    """Base of the argument models: immutable, and strict about keys.

    A key the model does not know is refused, as the schema (`additionalProperties: false`)
    says: ignoring it would silently change what the call means — `cwd` instead of
    `workdir` would run a command in the project root, `line` instead of `offset` would read
    from line 1. The error names the key and the accepted ones, so the model corrects the call
    in one step. Values are lax where that keeps their meaning ("5" for 5, null for an
    absent optional field).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")


ArgsT = TypeVar("ArgsT", bound=ToolArgs)


def parse_args(model: type[ArgsT], args: Any, tool: str) -> ArgsT:
    """Validated arguments, or a `ToolError` naming each problem.

    e.g. "invalid arguments for edit_file: old_string: Field required", or for a key the
    model does not know "invalid arguments for bash: cwd: unknown argument; the arguments
    are command, workdir, timeout".
    """
    if not isinstance(args, dict):
        raise ToolError(f"invalid arguments for {tool}: expected an object")
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = []
        for err in errors[:5]:
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                problems.append(f"{loc}: unknown argument")
            else:
                problems.append(f"{loc}: {err['msg']}" if loc else str(err["msg"]))
        if any(err["type"] == "extra_forbidden" for err in errors):
            problems.append("the arguments are " + ", ".join(model.model_fields))
        raise ToolError(f"invalid arguments for {tool}: " + "; ".join(problems)) from None
