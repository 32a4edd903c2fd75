"""Where the session database lives: the state directory and the file in it.

Owns `DB_FILENAME` and the lookup of the state directory: `$DEFECT_STATE_DIR`, else
`$XDG_STATE_HOME/defect`, else `~/.local/state/defect`.

Invariant: only the environment decides, and nothing here touches the disk (the store creates
the directory, mode 0700, when it opens), so the lookup is safe on the `initialize` path.

Why a module of its own: the CLI, the scripts and the store ask the same question, and the
answer must not differ between them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

DB_FILENAME: Final = "sessions.sqlite3"


def default_state_dir() -> Path:
    """`$DEFECT_STATE_DIR`, else `$XDG_STATE_HOME/defect`, else `~/.local/state/defect`.

    A relative `XDG_STATE_HOME` is ignored, as the XDG base-directory spec asks.
    """
    explicit = os.environ.get("DEFECT_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "defect"
    return Path.home() / ".local" / "state" / "defect"


def default_store_path() -> Path:
    return default_state_dir() / DB_FILENAME
