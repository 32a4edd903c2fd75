"""The summary of `make test-sdk-next` (`scripts/sdk_next_report.py`): failures grouped by
their cause, what varies between tests blanked, the totals from the JUnit XML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scripts.sdk_next_report import cause, report

REPO = Path(__file__).resolve().parents[1]

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5" failures="2" errors="1" skipped="1">
<testcase classname="tests.test_a" name="test_one"><failure message="ImportError: cannot
import name 'update_agent_message_text' from 'acp.helpers' (/tmp/x/acp/helpers.py)">tb</failure>
</testcase>
<testcase classname="tests.test_b" name="test_two"><failure message="ImportError: cannot
import name 'update_agent_thought_text' from 'acp.helpers' (/tmp/y/acp/helpers.py)">tb</failure>
</testcase>
<testcase classname="tests.test_c" name="test_three"><error message="TimeoutError: 30 s">tb</error>
</testcase>
<testcase classname="tests.test_d" name="test_four"><skipped message="no"/></testcase>
<testcase classname="tests.test_e" name="test_five"/>
</testsuite></testsuites>
"""


def test_causes_that_differ_only_in_names_and_paths_are_one_group(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    text = report(junit)
    assert text.splitlines()[0] == "5 tests: 1 passed, 2 failed, 1 errors, 1 skipped"
    assert "    2 failure: ImportError: cannot" in text
    assert "tests.test_a::test_one" in text and "tests.test_b::test_two" in text
    assert "    1 error: TimeoutError: … s" in text


def test_a_cause_is_the_first_line_with_values_blanked() -> None:
    assert cause("\n  KeyError: 'messageId' at 0x7f00ab\nmore") == "KeyError: '…' at …"
    assert cause("") == "(no message)"


def test_without_a_report_the_log_is_shown_and_the_exit_is_1(tmp_path: Path) -> None:
    log = tmp_path / "pytest.log"
    log.write_text("collecting\nImportError: no module named acp.helpers\n")
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "sdk_next_report.py"),
            str(tmp_path / "none.xml"),
            "--log",
            str(log),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "ImportError: no module named acp.helpers" in done.stdout
