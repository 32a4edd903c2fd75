"""What a failed SQLite call means to a person: every sqlite error as a clear `StorageError`.

Owns `storage_error`, the one translation of `sqlite3.Error` into the text a user reads (in the
editor and on stderr): what could not be done, why (disk full, locked by another process,
damaged file, no permission, a failing disk, a closed store) and what to do about it; and
`GroupLost`, the one error that means "nothing of this group of writes was written".

Invariant: the text always starts with "cannot <what>" and names the database file, so the
error makes sense without the traceback; each translation is logged once, as `store_error`.

Why apart from `sqlite.py`: the implementation and the migration runner raise the same errors,
and the wording is easier to keep consistent in one place.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from defect_core.errors import StorageError
from defect_core.log import get_logger

log = get_logger("defect.store")


class GroupLost(StorageError):
    """A group of writes (`transactions.py`) whose transaction SQLite rolled back under one of
    them: nothing of the group was written, and each write may be run again alone."""


def storage_error(exc: sqlite3.Error, what: str, path: Path, busy_timeout: float) -> StorageError:
    """A `StorageError` that says what could not be done, why, and what to do about it."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    where = f"the session database {path}"
    if primary == sqlite3.SQLITE_FULL:
        text = (
            f"cannot {what}: {where} is full (no space left on the disk, or a size limit); "
            "nothing of this change was written — free some space and retry"
        )
    elif primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        text = (
            f"cannot {what}: {where} is locked by another process "
            f"(waited {busy_timeout:g} s); retry in a moment"
        )
    elif primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        text = (
            f"cannot {what}: {where} is damaged or not a defect database ({exc}); "
            "move it aside or set DEFECT_STATE_DIR"
        )
    elif primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN):
        text = (
            f"cannot {what}: {where} cannot be opened for writing ({exc}); "
            "check its permissions or set DEFECT_STATE_DIR"
        )
    elif primary == sqlite3.SQLITE_IOERR:
        text = (
            f"cannot {what}: the disk failed while writing {where} ({exc}); "
            "this change may not have been saved"
        )
    elif isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
        text = f"cannot {what}: the session store {path} is closed"
    else:
        text = f"cannot {what}: {where} failed ({exc})"
    log.warning("store_error", error=text, sqlite_error=getattr(exc, "sqlite_errorname", ""))
    return StorageError(text)
