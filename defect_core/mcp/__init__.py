"""MCP servers as session tools: connect them, offer their tools, stop them.

The client side is the official `mcp` SDK (`ClientSession` over its stdio, streamable-HTTP and
SSE transports). One room per job, lowest first (docs/layers.md):

- `spec.py`        which servers a session asks for: `McpServerSpec`, `.mcp.json`, config
                   tables, merging with the editor's list (the request wins)
- `convert.py`     an MCP tool result as defect's `ToolOutput`
- `connection.py`  one server from start to stop: transport, `ClientSession`, process group
- `tool.py`        one server tool behind the `Tool` protocol (`McpTool`): names, schemas,
                   safety, calls
- `hub.py`         a session's servers together (`McpHub`): started in the background, each
                   within its time-out, their tools joining as they are ready, the failures,
                   stop them all

Invariant: importing this package imports no `mcp` (docs/architecture.md, rule 6): the SDK
(a slow import) is loaded by the start-up task of the first `McpHub` that has servers to start, and
`supported_transports` (asked during `initialize`) only looks it up.
"""

from defect_core.mcp.connection import supported_transports
from defect_core.mcp.hub import McpHub
from defect_core.mcp.spec import (
    McpServerSpec,
    load_mcp_json,
    merge_servers,
    parse_server_table,
    server_spec,
)
from defect_core.mcp.tool import McpTool, object_schema, safety_of, tool_name

__all__ = [
    "McpHub",
    "McpServerSpec",
    "McpTool",
    "load_mcp_json",
    "merge_servers",
    "object_schema",
    "parse_server_table",
    "safety_of",
    "server_spec",
    "supported_transports",
    "tool_name",
]
