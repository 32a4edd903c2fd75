"""defect's runtime: messages, history, the turn runner, tools, providers and storage.

This package never imports the ACP SDK nor `defect_acp` (docs/architecture.md, rule 1): it can be
embedded as a library and tested without any protocol in the way.
"""

__version__ = "0.1.0"
