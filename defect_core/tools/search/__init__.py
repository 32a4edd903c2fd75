"""The `search` tool: a regex over file contents and/or a glob over file names, gitignore-aware.

One module per job:

- `ignore`: which files a search considers (the tree walk, `.gitignore` rules, glob syntax);
- `matching`: which of them match, and which lines (globs, the RE2 scan, the caps);
- `rg_engine`: ripgrep, when installed, as a prefilter of the files the scan reads;
- `ordering`: the scan of rg's candidates as they come, answering in the walk's order;
- `preview`: the first hits of a running search, streamed as the call's progress;
- `tool`: the tool the model calls (arguments, run, progress, report).

The invariants each keeps are in its docstring: ignored files and symbolic links are never
searched; binary, non-UTF-8 and over-large files are skipped and counted (non-UTF-8 ones
when they hold a match); matching is linear in the file's size whatever the pattern (RE2);
results are capped with a marker saying so.
The search works without `rg` or `git`; with `rg` it reads only the files rg lists, and its
results are the same (tests/test_search_engines.py).

This module only re-exports, so `from defect_core.tools.search import ...` names every
public piece wherever it lives.
"""

from defect_core.tools.search.ignore import IgnoreRules, parse_ignore, translate_glob, walk_files
from defect_core.tools.search.matching import (
    MAX_FILE_BYTES,
    MAX_LINE_CHARS,
    GlobFilter,
    ScanResult,
    compile_pattern,
    scan,
)
from defect_core.tools.search.tool import (
    DEFAULT_MAX_RESULTS,
    MAX_RESULTS,
    SEARCH_DEADLINE,
    SearchArgs,
    SearchTool,
)

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "MAX_FILE_BYTES",
    "MAX_LINE_CHARS",
    "MAX_RESULTS",
    "SEARCH_DEADLINE",
    "GlobFilter",
    "IgnoreRules",
    "ScanResult",
    "SearchArgs",
    "SearchTool",
    "compile_pattern",
    "parse_ignore",
    "scan",
    "translate_glob",
    "walk_files",
]
