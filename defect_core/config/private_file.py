"""The user's configuration directory, and a private file written there atomically.

Owns `user_config_dir` (`$XDG_CONFIG_HOME/defect/`, else `~/.config/defect/`: the directory of
the user's `config.toml`, as `defect_core/confined.py` finds it) and `write_private`, which
every file defect writes there goes through: the trust decisions (`trust_store.py`) and the
stored credentials (`credentials.py`).

Invariants:
- A write is atomic: the new content goes to a temporary file in the same directory (created
  0600 by `tempfile.mkstemp`), is flushed to disk and renamed over the old file, so a crash
  leaves the old file or the new one, never half of one, and never a moment where the file
  is readable by others.
- The directory it creates for the file is 0700: what lives beside the configuration may be secret.

Why a room of its own: two files share the same care, and it is stated and written once.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from defect_core.confined import config_paths

__all__ = ["user_config_dir", "write_private"]


def user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory of the user's `config.toml` (present or not)."""
    return config_paths(None, os.environ if env is None else env)[0].parent


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, atomically, readable and writable by the user only; its
    directory is created 0700 when missing."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)  # mkdir's mode is masked by the umask
    fd, temporary = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
