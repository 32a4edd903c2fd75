"""Logging's own import stays off the editor's path: structlog is imported without `rich`.

Run in a fresh interpreter: the test process may have imported `rich` already (the import
linter brings it).
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import importlib.util, json, sys
import defect_core.log
import structlog.dev
loaded = "rich" in sys.modules
installed = importlib.util.find_spec("rich") is not None
dev_rich = structlog.dev.rich is not None
print(json.dumps({"loaded": loaded, "installed": installed, "dev_rich": dev_rich}))
"""


def test_structlog_is_imported_without_rich_and_rich_stays_importable() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout)
    assert seen["loaded"] is False and seen["dev_rich"] is False
    if seen["installed"]:  # the hiding is undone: whoever wants rich later still gets it
        again = subprocess.run(
            [sys.executable, "-c", "import defect_core.log, rich.console"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
