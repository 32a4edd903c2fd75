"""The user's trust decisions made with `/trust`: `<user config dir>/defect/trust.toml`.

Owns where the file is (`trust_file`), reading it (`read_trust`: project real path → the
digests of the settings the user was shown when trusting it), and changing one project's
entry (`record_trust`, `forget_trust`). The file, written by defect only:

    # Projects trusted with /trust: what each was trusted with, as digests.
    [[project]]
    path = "/home/me/src/app"
    trusted = ["3f0c…", "9a41…"]   # sha256 of each setting shown in the question

Why a file of its own rather than an edit of `trusted_projects` in `config.toml`: the user's
configuration is theirs — hand-written, commented, formatted — and tomllib cannot write TOML
back, so editing it in place would either lose what the user wrote or need a second TOML
library on the `session/new` path. A file defect owns alone can be rewritten whole, atomically,
and holds digests no one would want to read in their configuration. `trusted_projects` stays
the hand-written way to trust a project wholesale (`config/trust.py` reads both).

Invariants:
- Only the user's own configuration directory holds it (`$XDG_CONFIG_HOME/defect/`, else
  `~/.config/defect/`, the directory of the user's `config.toml`): no project file is ever
  read as trust, and a project path is stored as its real path.
- A write is atomic and the file private to the user (mode 0600): `private_file.write_private`
  writes it, as it writes the stored credentials.
- A file that cannot be read or parsed trusts nothing (logged), and is not overwritten by a
  later `/trust` without the user seeing why: recording into it raises `TrustFileError`.
- Only digests are stored: never a command line, a URL or a value of the project's files.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path

from defect_core.config.private_file import user_config_dir, write_private
from defect_core.log import get_logger

__all__ = ["TrustFileError", "forget_trust", "read_trust", "record_trust", "trust_file"]

log = get_logger("defect.config")

HEADER = (
    "# Projects trusted with /trust in defect: what each was trusted with, as digests of the\n"
    "# settings shown when it was trusted. Written by defect; `/trust revoke` removes one.\n"
)


class TrustFileError(OSError):
    """The trust file exists but cannot be used (unreadable, not TOML, not its shape)."""


def trust_file(env: Mapping[str, str] | None = None) -> Path:
    """Where the trust decisions are: beside the user's `config.toml`."""
    return user_config_dir(env) / "trust.toml"


def _load(path: Path) -> dict[str, frozenset[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise TrustFileError(f"{path}: cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TrustFileError(f"{path}: is not valid TOML: {exc}") from None
    entries = data.get("project", [])
    if not isinstance(entries, list):
        raise TrustFileError(f"{path}: `project` must be an array of tables")
    trusted: dict[str, frozenset[str]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise TrustFileError(f"{path}: each [[project]] must be a table")
        where, digests = entry.get("path"), entry.get("trusted", [])
        if not isinstance(where, str) or not isinstance(digests, list):
            raise TrustFileError(f"{path}: a [[project]] needs path and a trusted list")
        trusted[where] = frozenset(str(d) for d in digests)
    return trusted


def read_trust(path: Path) -> dict[str, frozenset[str]]:
    """Project real path → the digests it was trusted with; {} when there is no usable file."""
    try:
        return _load(path)
    except TrustFileError as exc:
        log.warning("trust_file_unusable", error=str(exc), effect="no project is trusted by it")
        return {}


def _write(path: Path, trusted: Mapping[str, frozenset[str]]) -> None:
    lines = [HEADER]
    for project in sorted(trusted):
        digests = ", ".join(json.dumps(d) for d in sorted(trusted[project]))
        # json.dumps writes a valid TOML basic string (ASCII, TOML's own escapes).
        lines.append(f"\n[[project]]\npath = {json.dumps(project)}\ntrusted = [{digests}]\n")
    write_private(path, "".join(lines))


def record_trust(path: Path, project: str, digests: frozenset[str]) -> None:
    """Trust `project` (a real path) with exactly `digests`, replacing an earlier entry."""
    trusted = dict(_load(path))
    trusted[project] = digests
    _write(path, trusted)


def forget_trust(path: Path, project: str) -> bool:
    """Remove `project`'s entry; False when there was none."""
    trusted = dict(_load(path))
    if trusted.pop(project, None) is None:
        return False
    _write(path, trusted)
    return True
