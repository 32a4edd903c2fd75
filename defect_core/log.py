"""Logging: structured lines to stderr (and optionally a file), never to stdout.

Owns the process's logging set-up: structlog for defect's own events, the stdlib `logging`
root (which the ACP SDK and the provider SDKs use) routed to the same place.

Invariants: nothing here writes to stdout; every line goes through the filters registered
with `filter_lines` (the stored credentials' `redaction.hide_remembered`), so no line shows a
stored secret this process read. Under `defect acp`, stdout carries JSON-RPC and nothing else
(docs/architecture.md, rule 5); a stray line there corrupts the protocol stream.

structlog imports `rich` for its console renderer whenever `rich` is installed (a development
tool brings it), a cost on the path an editor waits on (`initialize`: scripts/bench_startup.py
prints it against the `import acp` floor). defect renders JSON lines, never the console:
`structlog` is imported with `rich` hidden, unless something imported `rich` already.

Configuration: `DEFECT_LOG_LEVEL` (debug, info, warning — the default —, error) and
`DEFECT_LOG_FILE` (also append the lines to this file). The lines are JSON, or with
`fmt="human"` (`defect exec`, whose stderr a person reads) one plain line each:
`defect: warning: model_call_failed (error='…', attempt=1)`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

if "rich" in sys.modules:
    import structlog
else:
    sys.modules["rich"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import structlog
    finally:
        del sys.modules["rich"]

_configured = False


FORMATS = ("json", "human")


def configure(level: str | None = None, log_file: str | None = None, fmt: str = "json") -> None:
    """Set up logging once for the process. Safe to call again (later calls are no-ops).
    `fmt`: one of `FORMATS`."""
    global _configured
    if _configured:
        return
    _configured = True
    level_name = (level or os.environ.get("DEFECT_LOG_LEVEL") or "warning").upper()
    numeric = getattr(logging, level_name, logging.WARNING)
    log_file = log_file or os.environ.get("DEFECT_LOG_FILE")

    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    root = logging.getLogger()
    root.handlers[:] = []
    for handler in handlers:
        handler.setFormatter(_Hiding("%(message)s"))
        root.addHandler(handler)
    root.setLevel(numeric)

    rendering: list[Any] = (
        [structlog.processors.format_exc_info, _human_line]
        if fmt == "human"
        else [
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            *rendering,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )


_LINE_FILTERS: list[Callable[[str], str]] = []


def filter_lines(function: Callable[[str], str]) -> None:
    """Pass every line written from now on through `function` (once per function): the
    stored credentials register `redaction.hide_remembered` as soon as one is read."""
    if function not in _LINE_FILTERS:
        _LINE_FILTERS.append(function)


class _Hiding(logging.Formatter):
    """Every line through the registered filters (`filter_lines`): an SDK's debug line or an
    error message never shows a stored key this process read."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        for function in _LINE_FILTERS:
            line = function(line)
        return line


def _human_line(_logger: Any, _method: str, event: dict[str, Any]) -> str:
    """One event as one plain line (then its traceback, if any)."""
    level = event.pop("level", _method)
    name = event.pop("event", "")
    trace = event.pop("exception", None)
    details = ", ".join(f"{key}={value!r}" for key, value in event.items())
    line = f"defect: {level}: {name}" + (f" ({details})" if details else "")
    return f"{line}\n{trace}" if trace else line


def get_logger(name: str) -> Any:
    """A structlog logger (lazy: it binds to whatever `configure` set up by its first use)."""
    return structlog.get_logger(name)


# structlog's out-of-the-box logger prints to stdout. Until `configure` runs (library use,
# in-process tests) send it to stderr instead, so no import of defect can write to stdout.
if not structlog.is_configured():
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
