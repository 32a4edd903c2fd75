"""The `anthropic` SDK's quarantine: every private name of the SDK defect reads, read here.

Owns the switch for every reach into the SDK's internals (`enabled`), the list of those
internals (`PRIVATE_MODULES`, `PRIVATE_ATTRIBUTES`), and the one reach left: `install()`,
which puts `LazyPackageFinder` on `sys.meta_path` (once per process) to import only the part
of the SDK a streamed Messages call uses. No other module of defect reads a private name of
the SDK (tests/test_sdk_quarantine.py walks them all), and each name listed exists in the
SDK installed (tests/test_lazy_sdk.py). The call itself uses the SDK's public API only
(`call.py`: the client's `post`, `anthropic.AsyncStream`, the public event types).

The switch says yes only for the SDK versions whose internals were checked
(`KNOWN_VERSIONS`, read from the installed `anthropic/_version.py` without importing the
package), and never when `DEFECT_PRIVATE_PATHS=off`. Anywhere else the SDK is imported as
documented (`import anthropic`, its whole `__init__`): slower to the first token, the same
requests and events. docs/architecture.md, "Private internals", lists every private name
read; scripts/bench_first_token.py prints the first prompt's wait both ways in the same run,
and their ratio (a headline row of `make bench`).

Why: `import anthropic` runs the package's `__init__`, which imports every type of every API
the SDK covers (thousands of modules, most of them pydantic models: most of the wait of the
first prompt), while a Messages stream needs the client, the messages resource and the
event types (about a third of that). Most of the SDK's package `__init__` files only
re-export names (`from .message import Message as Message`); this finder loads such a
package without running its `__init__` and gives the module a `__getattr__` that imports the
one submodule a name comes from, the first time someone asks for it.

Invariants:
- Same objects, same behaviour: a name resolves to the very object the eager `__init__`
  would have bound (it imports the same submodule), and a name the map does not know (or any
  `from anthropic import *`) runs the real `__init__` in the module, once, under a lock -
  the eager import, just later. The package's `__module__` renaming of its exports (only
  cosmetic: it changes `repr`s) is the one thing the lazy path skips.
- One exception to "same objects", for the calls of `DEFERRED_CALLS`: while their module is
  not loaded, a name such as `anthropic.lib._tracing.finish_api_call_span` resolves to a
  function that imports the module on its first call and calls the real one (same arguments,
  same result; only its identity differs, and it is not kept in the package). The SDK's
  client imports these OpenTelemetry helpers at module level but calls them only for a span
  that records, and their module imports the beta API's types (hundreds of modules, most of
  the rest of the first prompt's wait). Once the module is loaded, the real function is given.
- Likewise for the plain modules of `DEFERRED_MODULES`: `anthropic._error_classes` (the typed
  error of every API error code, over a hundred modules of beta types) is created without
  running; its `make_status_error`, which the client calls on an error answer only, is a
  forwarder that runs the module first; any other name runs it at once (the plain import,
  just later).
- Only packages whose `__init__` is nothing but relative `from . import` statements,
  `__all__` and a docstring are loaded lazily - except the top package `anthropic`, whose
  few other statements are known: star imports (resolved through each source's `__all__`),
  `import typing`, a `TYPE_CHECKING` block, the logging set-up (`_setup_logging()`, run here
  when the lazy package is created, so `ANTHROPIC_LOG` still works) and the renaming loop.
  Any other statement, or an `__init__` that does not parse, loads the package the usual way.
- A test (tests/test_lazy_sdk.py) pins that the SDK this project installs is one of
  `KNOWN_VERSIONS` and is still loaded lazily, that a streamed call through it matches the
  eager import, and that an unknown version or the switch set off leaves the import eager.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any, NamedTuple

__all__ = [
    "DEFERRED_CALLS",
    "DEFERRED_MODULES",
    "KNOWN_VERSIONS",
    "PRIVATE_ATTRIBUTES",
    "PRIVATE_MODULES",
    "SWITCH",
    "LazyPackageFinder",
    "enabled",
    "install",
    "lazily_loaded",
    "sdk_version",
]

ROOT = "anthropic"
KNOWN_VERSIONS: frozenset[tuple[int, int]] = frozenset({(2, 14)})
"""The SDK's (major, minor) versions whose internals were checked: the `__init__` files this
module parses and the names it defers (tests/test_lazy_sdk.py), on the version installed.
Add a version here only once those tests pass against it."""
SWITCH = "DEFECT_PRIVATE_PATHS"
"""`off` (or `0`, `no`, `false`) keeps the SDK to its documented use, whatever the version."""
_OFF = frozenset({"off", "0", "no", "false"})
_VERSION_LINE = re.compile(r"""^__version__\s*=\s*["'](\d+)\.(\d+)[.\w-]*["']""", re.MULTILINE)
# Functions a re-export package hands out as forwarders until their module loads (see the
# docstring): package → names. Each must be a plain function (tests/test_lazy_sdk.py).
DEFERRED_CALLS: dict[str, frozenset[str]] = {
    "anthropic.lib._tracing": frozenset(
        {
            "finish_api_call_span",
            "messages_create_request_attributes",
            "sessions_create_request_attributes",
        }
    ),
}
# Plain modules created without running until a name is asked for; the names listed (plain
# functions) are forwarders that run the module on their first call.
DEFERRED_MODULES: dict[str, frozenset[str]] = {
    "anthropic._error_classes": frozenset({"make_status_error"}),
}
PRIVATE_MODULES: tuple[str, ...] = (
    "anthropic._version",  # read as a file, `sdk_version`
    "anthropic._utils._logs",
    "anthropic._error_classes",
    "anthropic.lib._tracing",
    "anthropic.lib._tracing._api_call",  # where the deferred calls' forwarders import from
)
"""Every private module of the SDK this module names (tests/test_lazy_sdk.py imports each)."""
PRIVATE_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("anthropic._version", "__version__"),
    ("anthropic._utils._logs", "setup_logging"),
    ("anthropic._error_classes", "make_status_error"),
    *((package, name) for package, names in DEFERRED_CALLS.items() for name in sorted(names)),
)
"""Every private name this module reads: (a module, a name in it). tests/test_lazy_sdk.py
checks each against the installed SDK; tests/test_sdk_quarantine.py fails when another
module reads one of these names."""
_LOGS = "anthropic._utils._logs"
# Statements of the top package's __init__ the lazy path may skip (see the docstring).
_TOP_LEVEL_SKIPPABLE = (ast.Import, ast.If, ast.For, ast.Assign, ast.Expr)

_installed = threading.Lock()
_finder: LazyPackageFinder | None = None


_loaded_version: list[tuple[int, int] | None] = []
"""The version read once the SDK is imported (it cannot change under a running process)."""


def sdk_version() -> tuple[int, int] | None:
    """The installed SDK's (major, minor), read from its `_version.py` without importing the
    package; None when it is not installed or says no version in the known form."""
    if _loaded_version:
        return _loaded_version[0]
    version = _read_version()
    if ROOT in sys.modules:
        _loaded_version[:] = [version]
    return version


def _read_version() -> tuple[int, int] | None:
    try:
        spec = importlib.util.find_spec(ROOT) if ROOT not in sys.modules else None
        locations = (
            list(spec.submodule_search_locations or [])
            if spec is not None
            else list(getattr(sys.modules[ROOT], "__path__", []))
        )
        for location in locations:
            with open(os.path.join(location, "_version.py"), encoding="utf-8") as file:
                found = _VERSION_LINE.search(file.read(4096))
            if found is not None:
                return int(found[1]), int(found[2])
    except (OSError, ImportError, ValueError):
        return None
    return None


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the SDK's internals may be used (the lazy import): the
    installed SDK is one of `KNOWN_VERSIONS` and `environ` (default: the process's) does not
    set `DEFECT_PRIVATE_PATHS` off."""
    environ = os.environ if environ is None else environ
    if environ.get(SWITCH, "").strip().lower() in _OFF:
        return False
    return sdk_version() in KNOWN_VERSIONS


def install() -> None:
    """Load the SDK's packages lazily from now on (idempotent; a no-op once it is imported,
    or when `enabled()` says no: the SDK then imports as documented)."""
    global _finder
    with _installed:
        if _finder is None and ROOT not in sys.modules and enabled():
            _finder = LazyPackageFinder()
            sys.meta_path.insert(0, _finder)


def lazily_loaded(module: ModuleType) -> bool:
    """Whether `module` was loaded by this finder (and its `__init__` has not run since)."""
    return isinstance(getattr(module, "__loader__", None), _LazyInit) and (
        "__getattr__" in module.__dict__
    )


class LazyPackageFinder(MetaPathFinder):
    """Finds the SDK's re-export packages and loads them without running their `__init__`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        spec = PathFinder.find_spec(fullname, path)
        deferred = DEFERRED_MODULES.get(fullname)
        if (
            deferred is not None
            and spec is not None
            and spec.submodule_search_locations is None
            and hasattr(spec.loader, "get_code")
        ):
            spec.loader = _DeferredRun(spec.loader, deferred)
            return spec
        if spec is None or spec.submodule_search_locations is None or not spec.origin:
            return None  # a plain module, or not found: the usual finders handle it
        try:
            with open(spec.origin, encoding="utf-8") as file:
                source = file.read()
            exports = _exports(fullname, ast.parse(source, spec.origin))
        except (OSError, SyntaxError, ValueError):
            return None
        if exports is None:
            return None
        spec.loader = _LazyInit(spec, source, exports)
        return spec


class _Exports(NamedTuple):
    names: dict[str, tuple[str, str | None]]  # name → (relative module, attribute | None)
    stars: list[str]  # relative modules star-imported (the top package only)
    all: list[str] | None  # the literal `__all__`, if any


def _exports(package: str, tree: ast.Module) -> _Exports | None:
    """What the `__init__` binds, or None when it does more than re-export. An attribute of
    None means the name is a submodule (`from . import types`)."""
    names: dict[str, tuple[str, str | None]] = {}
    stars: list[str] = []
    public: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    if package != ROOT:
                        return None
                    stars.append(source)
                elif node.module is None:
                    names[alias.asname or alias.name] = (source + alias.name, None)
                else:
                    names[alias.asname or alias.name] = (source, alias.name)
            continue
        if _is_all(node):
            value = getattr(node, "value", None)
            try:
                listed = ast.literal_eval(value) if value is not None else None
            except ValueError:
                listed = None
            public = list(listed) if isinstance(node, ast.Assign) and listed else None
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if package == ROOT and isinstance(node, _TOP_LEVEL_SKIPPABLE):
            continue
        return None
    return _Exports(names, stars, public)


def _is_all(node: ast.stmt) -> bool:
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AugAssign)
        else []
    )
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _star_names(module: ModuleType) -> Collection[str]:
    """The names `from module import *` binds."""
    listed = module.__dict__.get("__all__")
    if listed is not None:
        return set(listed)
    loader = module.__dict__.get("__loader__")
    if isinstance(loader, _LazyInit) and "__getattr__" in module.__dict__:
        return {n for n in loader._names if not n.startswith("_")}
    return {n for n in module.__dict__ if not n.startswith("_")}


def _forwarder(module: str, name: str) -> Callable[..., Any]:
    """A function that imports `module` when first called and calls its `name`."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__module__ = module
    return forward


class _DeferredRun(Loader):
    """Creates a plain module with a `__getattr__` instead of running it (`DEFERRED_MODULES`)."""

    def __init__(self, loader: Any, deferred: frozenset[str]) -> None:
        self._loader = loader  # the file loader: the module's code, its resources
        self._deferred = deferred
        self._lock = threading.RLock()

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        def __getattr__(name: str) -> Any:
            return self._resolve(module, name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]

    def _resolve(self, module: ModuleType, name: str) -> Any:
        if name in self._deferred:

            def forward(*args: Any, **kwargs: Any) -> Any:
                return self._run(module)[name](*args, **kwargs)

            forward.__name__ = forward.__qualname__ = name
            forward.__module__ = module.__name__
            return forward
        if name.startswith("__") and name != "__all__":  # __path__, __wrapped__...
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        try:
            return self._run(module)[name]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None

    def _run(self, module: ModuleType) -> dict[str, Any]:
        """Run the module's code in it, once (the plain import, later); its namespace."""
        with self._lock:
            namespace = module.__dict__
            if "__getattr__" in namespace:
                del namespace["__getattr__"]
                exec(self._loader.get_code(module.__name__), namespace)
        return namespace

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, get_source, ...
        return getattr(self._loader, name)


class _LazyInit(Loader):
    """Creates the package module with a `__getattr__` instead of running its `__init__`."""

    def __init__(self, spec: ModuleSpec, source: str, exports: _Exports) -> None:
        self._origin = spec.origin or ""
        self._source = source
        self._names = exports.names
        self._stars = exports.stars
        self._all = exports.all
        self._eager = threading.RLock()
        self._loader = spec.loader  # the file loader, for resource readers and the like

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        package = module.__name__

        def __getattr__(name: str) -> Any:
            return self._resolve(module, package, name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        if self._all is not None:
            module.__dict__["__all__"] = self._all
        if package == ROOT:
            importlib.import_module(_LOGS).setup_logging()

    def _resolve(self, module: ModuleType, package: str, name: str) -> Any:
        target = self._names.get(name)
        if target is not None:
            source, attribute = target
            if attribute is not None and name in DEFERRED_CALLS.get(package, ()):
                full = importlib.util.resolve_name(source, package)
                if full not in sys.modules:
                    return _forwarder(full, attribute)
            found = importlib.import_module(source, package)
            value = found if attribute is None else getattr(found, attribute)
            setattr(module, name, value)
            return value
        if name.startswith("__"):  # __path__, __file__, __wrapped__...: not an export
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            # `from . import submodule` asks the package first: a plain submodule import.
            return importlib.import_module(f"{package}.{name}")
        for source in self._stars:
            star = importlib.import_module(source, package)
            if name in _star_names(star):
                value = getattr(star, name)
                setattr(module, name, value)
                return value
        return self._run_init(module, package, name)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)

    def _run_init(self, module: ModuleType, package: str, name: str) -> Any:
        """A name nobody mapped: run the real `__init__` in the module (the eager import)."""
        with self._eager:
            namespace = module.__dict__
            if "__getattr__" in namespace:
                del namespace["__getattr__"]
                exec(compile(self._source, self._origin, "exec"), namespace)
        try:
            return namespace[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
