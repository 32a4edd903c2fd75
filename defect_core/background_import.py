"""Importing a heavy library in the background without slowing the editor's requests.

Owns `FOREGROUND` (the process's `ForegroundGate`) and `BackgroundImport`, a thread that
imports modules one at a time, each only while the gate is open.

Why: the first prompt waits on the provider's SDK (`import anthropic`, about a second), so it
should load from the moment the process starts - but an import is Python code that holds
the GIL, and on the same core it would slow the `initialize` and `session/new` answers the
editor waits on by as much as it runs. So the foreground says when it does not need the
interpreter: the front end closes the gate at start-up and its event loop opens it whenever
it sleeps waiting for input (`defect_cli/idle_loop.py`); the import thread runs only then.

Invariants:
- The gate is open unless a front end closed it: a process without an idle-aware loop (an
  embedding application, the tests) imports at full speed.
- Whoever needs the module now opens the gate for good (`FOREGROUND.open_for_good()`,
  before waiting on `BackgroundImport.wait`), so a waiting prompt never waits on itself.
- The thread never holds the import system's global lock while it waits: it waits in
  `exec_module`, before running a module's code, holding only the locks of the modules it
  is importing. If the main thread blocks on one of those (it imports a module the thread is
  in the middle of), the thread stops waiting at once, so the two can never deadlock.
- A module runs exactly as a plain import would run it: the wrapper hands the module back to
  its own loader (`__loader__`, `__spec__.loader` restored) before executing it.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["FOREGROUND", "BackgroundImport", "ForegroundGate"]

_POLL = 0.005  # how often a waiting import checks whether the main thread waits on it


class ForegroundGate:
    """Open while the foreground does not need the interpreter."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self._for_good = False

    def close(self) -> None:
        """The foreground is busy (a no-op once opened for good)."""
        if not self._for_good:
            self._open.clear()

    def open(self) -> None:
        self._open.set()

    def open_for_good(self) -> None:
        """Someone waits on the background work: let it run at full speed from now on."""
        self._for_good = True
        self._open.set()

    def wait(self, timeout: float) -> bool:
        return self._open.wait(timeout)


FOREGROUND = ForegroundGate()


class BackgroundImport:
    """Import `modules` (in order) in a daemon thread that yields to `gate`.

    `then` runs in that thread after the imports (its errors, like the imports', are kept and
    re-raised by nobody: `error` holds the first one, for the caller to log or to retry the
    import in the foreground, where it fails the same way with its own traceback).
    """

    def __init__(
        self,
        modules: Sequence[str],
        *,
        gate: ForegroundGate = FOREGROUND,
        then: Callable[[], object] | None = None,
        name: str = "defect-background-import",
    ) -> None:
        self._modules = tuple(modules)
        self._gate = gate
        self._then = then
        self._main = threading.main_thread()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the imports are done (True) or `timeout` passes (False)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        finder = _YieldingFinder(self._thread_is_current, self._yield)
        sys.meta_path.insert(0, finder)
        try:
            for module in self._modules:
                importlib.import_module(module)
            if self._then is not None:
                self._then()
        except BaseException as exc:
            self.error = exc
        finally:
            sys.meta_path.remove(finder)

    def _thread_is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def _yield(self) -> None:
        while not self._gate.wait(_POLL):
            if _waits_on_an_import(self._main):
                return


def _waits_on_an_import(thread: threading.Thread) -> bool:
    """Whether `thread` is blocked on a module lock (importing what another thread imports)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename == "<frozen importlib._bootstrap>" and code.co_name in (
            "acquire",
            "_lock_unlock_module",
        ):
            return True
        frame = frame.f_back
    return False


class _YieldingFinder(MetaPathFinder):
    """First on `sys.meta_path` while a `BackgroundImport` runs: in that thread only, wraps
    the spec the other finders return so that the module waits for the gate before it runs."""

    def __init__(self, active: Callable[[], bool], wait: Callable[[], None]) -> None:
        self._active = active
        self._wait = wait

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not self._active():
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _YieldingLoader(spec.loader, self._wait)
                return spec
        return None


class _YieldingLoader(Loader):
    def __init__(self, loader: Any, wait: Callable[[], None]) -> None:
        self._loader = loader
        self._wait = wait

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._wait()
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)
