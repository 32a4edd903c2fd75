"""The background import yields to the foreground and never deadlocks with it.

`defect_core/background_import.py` imports the provider's SDK in a thread that runs a module
only while the foreground gate is open; `defect_cli/idle_loop.py` opens the gate while the
event loop sleeps. Real modules (written to a temporary directory), real threads, a real
selector.
"""

from __future__ import annotations

import importlib
import socket
import sys
import threading
from collections.abc import Iterator
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

from defect_cli.idle_loop import IdleAwareSelector
from defect_core.background_import import BackgroundImport, ForegroundGate


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path for throwaway modules; they are forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in set(sys.modules) - before:
            del sys.modules[name]
        importlib.invalidate_caches()


def _write(root: Path, name: str, source: str) -> None:
    path = root.joinpath(*name.split("."))
    if name.endswith("pkg"):
        path.mkdir(parents=True, exist_ok=True)
        (path / "__init__.py").write_text(source)
    else:
        path.with_suffix(".py").write_text(source)
    importlib.invalidate_caches()


def test_a_closed_gate_holds_the_import_and_opening_it_lets_it_finish(modules: Path) -> None:
    _write(modules, "bg_first", "VALUE = 1\nimport bg_second\n")
    _write(modules, "bg_second", "VALUE = 2\n")
    gate = ForegroundGate()
    gate.close()
    job = BackgroundImport(["bg_first"], gate=gate)
    job.start()
    assert not job.wait(0.3)  # the thread is parked before running bg_first's code
    assert "bg_second" not in sys.modules
    gate.open()
    assert job.wait(30)
    assert job.error is None
    assert sys.modules["bg_first"].VALUE == 1 and sys.modules["bg_second"].VALUE == 2
    # Each module runs under its own loader, as a plain import would have run it.
    assert isinstance(sys.modules["bg_first"].__loader__, SourceFileLoader)
    assert isinstance(sys.modules["bg_second"].__spec__.loader, SourceFileLoader)


def test_the_main_thread_importing_the_same_module_is_never_deadlocked(modules: Path) -> None:
    # The thread parks inside bg_pkg (holding its module lock) behind a gate nobody opens;
    # the main thread then imports bg_pkg too and blocks on that lock: the thread must notice
    # and carry on, or this test hangs.
    _write(modules, "bg_pkg", "from bg_pkg import inner\nVALUE = inner.VALUE\n")
    _write(modules, "bg_pkg.inner", "VALUE = 'inner'\n")
    gate = ForegroundGate()
    gate.close()
    job = BackgroundImport(["bg_pkg"], gate=gate)
    job.start()
    assert not job.wait(0.2)
    imported = importlib.import_module("bg_pkg")
    assert imported.VALUE == "inner"
    assert job.wait(30) and job.error is None


def test_a_failing_import_is_kept_for_the_caller(modules: Path) -> None:
    _write(modules, "bg_broken", "raise RuntimeError('broken on purpose')\n")
    job = BackgroundImport(["bg_broken"])
    job.start()
    assert job.wait(30)
    assert isinstance(job.error, RuntimeError) and "broken on purpose" in str(job.error)
    with pytest.raises(RuntimeError, match="broken on purpose"):  # the foreground retry
        importlib.import_module("bg_broken")


def test_opened_for_good_the_gate_stays_open() -> None:
    gate = ForegroundGate()
    gate.close()
    assert not gate.wait(0)
    gate.open_for_good()
    gate.close()
    assert gate.wait(0)


def test_the_idle_aware_selector_opens_the_gate_only_while_the_loop_sleeps() -> None:
    import selectors

    gate = ForegroundGate()
    gate.close()
    selector = IdleAwareSelector(selectors.DefaultSelector(), gate)
    reader, writer = socket.socketpair()
    try:
        selector.register(reader, selectors.EVENT_READ)
        assert selector.select(0) == []  # a poll: the loop has work, the gate stays shut
        assert not gate.wait(0)

        def wake_when_open() -> None:
            if gate.wait(10):
                writer.send(b"x")

        waker = threading.Thread(target=wake_when_open)
        waker.start()
        ready = selector.select(10)  # sleeps: the gate opens, the waker writes
        waker.join()
        assert [key.fileobj for key, _ in ready] == [reader]
        assert not gate.wait(0)  # awake again: shut
        assert selector.get_key(reader).fileobj is reader
    finally:
        selector.close()
        reader.close()
        writer.close()
