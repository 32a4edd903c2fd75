"""The tools every session offers: read_file, write_file, edit_file, bash, search, fetch.

Owns nothing but the list, in the order the model is shown them. Each call returns fresh
instances; they hold no per-session state (that lives in `ToolContext.settings`).
"""

from __future__ import annotations

from defect_core.tools.base import Tool
from defect_core.tools.bash import BashTool
from defect_core.tools.fetch import FetchTool
from defect_core.tools.files import EditFileTool, ReadFileTool, WriteFileTool
from defect_core.tools.search import SearchTool


def builtin_tools() -> list[Tool]:
    return [ReadFileTool(), WriteFileTool(), EditFileTool(), BashTool(), SearchTool(), FetchTool()]
