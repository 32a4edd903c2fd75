"""The built-in tools' derived input schemas, kept in the state directory between processes.

Owns `SCHEMAS`, the process's `SchemaCache`: `tools.base.input_schema` asks it before deriving
a schema from a tool's argument model, gives it what it derived, and `ToolRegistry.specs`
has it written back (`flush`) when anything was new. The session core names the directory
(`use`), beside the session database; without one (library use, the tests) nothing is read
or written and every schema is derived, as before.

Why: deriving the schemas is pydantic's JSON-schema generation (and, for models whose build
is deferred, their core schemas), milliseconds of CPU for the built-in set, and every new
`defect acp` process paid it on its first prompt, for the same code every time
(`scripts/bench_startup.py`, "first offline 'hello' turn").

Invariants:
- A cached schema is used only for the code that derived it. Its key covers the Python and
  pydantic versions, the size and mtime of the file deriving it (`tools/base.py`, which also
  compacts it) and of every module defining the model or a model it nests (the rule Python's
  own bytecode cache trusts), and what pydantic holds of each of those models: their fields
  (types, defaults, descriptions, bounds — constants imported from elsewhere included, as
  values), config and docstrings, and the members of any enum a field names. Anything else
  derives the schema again and replaces the entry.
- `use` touches no disk (it runs on the `session/new` path); the file is read once, by the
  first lookup, and written only after a schema was derived: atomically (a temporary renamed
  into place), not fsynced — a lost write is one derivation more next time.
- A missing, unreadable or malformed file, or one another version wrote, is ignored (and
  replaced); a failed write is logged. Neither ever fails a prompt.
"""

from __future__ import annotations

import os
import sys
import threading
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from defect_core.log import get_logger

if TYPE_CHECKING:
    from pydantic import BaseModel

log = get_logger("defect.tools")

FILENAME = "tool-schemas.json"
FORMAT = 1
# hashlib, json and re are imported by the first lookup: this module is imported on the
# `initialize` path (by `tools.base`), where loading the OpenSSL behind hashlib is a cost.


class SchemaCache:
    def __init__(self) -> None:
        self._path: Path | None = None
        self._entries: dict[str, dict[str, Any]] | None = None
        self._dirty = False
        self._keys: dict[type, str] = {}
        self._lock = threading.Lock()

    def use(self, directory: Path | None) -> None:
        """Keep the cache in `directory` (None: keep none). No disk access here."""
        with self._lock:
            path = None if directory is None else Path(directory) / FILENAME
            if path != self._path:
                self._path, self._entries, self._dirty = path, None, False

    def get(self, model: type[BaseModel]) -> dict[str, Any] | None:
        """The schema cached for `model` as it is now, or None."""
        with self._lock:
            entries = self._loaded()
            if entries is None:
                return None
            entry = entries.get(_name(model))
            if entry is None or entry.get("key") != self._key(model):
                return None
            schema = entry.get("schema")
            return schema if isinstance(schema, dict) else None

    def put(self, model: type[BaseModel], schema: dict[str, Any]) -> None:
        """`schema` was just derived from `model`: cache it (written by `flush`)."""
        with self._lock:
            entries = self._loaded()
            if entries is None:
                return
            entries[_name(model)] = {"key": self._key(model), "schema": schema}
            self._dirty = True

    def flush(self) -> None:
        """Write the file if a schema was derived since it was read."""
        with self._lock:
            if not self._dirty or self._path is None or self._entries is None:
                return
            self._dirty = False
            path, body = self._path, {"format": FORMAT, "schemas": self._entries}
        import json

        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(json.dumps(body, separators=(",", ":"), sort_keys=True))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("tool_schema_cache_unwritable", path=str(path), error=str(exc))
            tmp.unlink(missing_ok=True)

    def _key(self, model: type[BaseModel]) -> str:
        key = self._keys.get(model)
        if key is None:
            key = self._keys[model] = model_key(model)
        return key

    def _loaded(self) -> dict[str, dict[str, Any]] | None:
        """The entries (read from the file the first time); None without a directory."""
        if self._path is None:
            return None
        if self._entries is None:
            self._entries = _read(self._path)
        return self._entries


def _read(path: Path) -> dict[str, dict[str, Any]]:
    import json

    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.info("tool_schema_cache_ignored", path=str(path), error=str(exc))
        return {}
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        return {}
    schemas = body.get("schemas")
    if not isinstance(schemas, dict):
        return {}
    return {k: v for k, v in schemas.items() if isinstance(v, dict)}


def _name(model: type) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def model_key(model: type[BaseModel]) -> str:
    """What the schema derived from `model` depends on, hashed (see the invariants)."""
    import enum
    import hashlib
    import re

    import pydantic

    address = re.compile(r" at 0x[0-9a-fA-F]+")
    digest = hashlib.sha256()
    digest.update(f"{sys.version}\0{pydantic.VERSION}\0".encode())
    files = {_file_of(__name__), _file_of("defect_core.tools.base")}
    models, annotations = _within(model, pydantic.BaseModel)
    for cls in models:
        files.add(_file_of(cls.__module__))
        fields = address.sub("", repr(cls.model_fields))
        config = address.sub("", repr(sorted(cls.model_config.items(), key=lambda kv: kv[0])))
        digest.update(f"{_name(cls)}\0{cls.__doc__}\0{fields}\0{config}\0".encode())
    for annotation in annotations:
        if _is_subclass(annotation, enum.Enum):
            files.add(_file_of(annotation.__module__))
            members = [(m.name, m.value) for m in annotation]
            digest.update(f"{_name(annotation)}\0{members!r}\0".encode())
    for file in sorted(files):
        digest.update(f"{file}\0{_stat_of(file)}\0".encode())
    return digest.hexdigest()


def _within(
    model: type[BaseModel], root: type[BaseModel]
) -> tuple[list[type[BaseModel]], list[Any]]:
    """`model`, its model bases and every model its fields name, at any depth; and every
    type their fields name (`list[X]`, `X | None`, `Annotated[X, ...]` taken apart)."""
    models: list[type[BaseModel]] = []
    annotations: list[Any] = []
    todo: list[type[BaseModel]] = [model]
    while todo:
        cls = todo.pop()
        if cls in models:
            continue
        models.append(cls)
        todo.extend(b for b in cls.__mro__[1:] if _is_subclass(b, root) and b is not root)
        for field in cls.model_fields.values():
            within = _args_of(field.annotation)
            annotations.extend(within)
            todo.extend(a for a in within if _is_subclass(a, root))
    return models, annotations


def _args_of(annotation: Any) -> list[Any]:
    out = [annotation]
    for arg in typing.get_args(annotation):
        out.extend(_args_of(arg))
    return out


def _is_subclass(value: Any, base: type) -> bool:
    try:
        return isinstance(value, type) and issubclass(value, base)
    except TypeError:  # a generic alias passing for a class
        return False


def _file_of(module: str) -> str:
    return str(getattr(sys.modules.get(module), "__file__", None) or module)


def _stat_of(file: str) -> str:
    try:
        st = os.stat(file)
    except OSError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


SCHEMAS = SchemaCache()
"""The process's cache (the schemas are per process too: `tools.base.input_schema`)."""
