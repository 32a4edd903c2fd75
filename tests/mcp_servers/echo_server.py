"""A small MCP server for defect's tests, on the official SDK's `MCPServer`.

Owns the tools the MCP tests call. Each one pins down one behaviour of defect's MCP client:

- `echo` (read-only hint), `write_note` (no hints), `wipe` (destructive hint): safety classes;
- `image`, `resource`, `big`, `fail`: how results map (image, embedded resources, truncation,
  `isError`);
- `crash` (the process exits mid-call), `hang` (never answers): failures during a session;
- `pid`, `spawn_child`: process ids, so a test can check nothing outlives the session.

Run: `python tests/mcp_servers/echo_server.py` (stdio). `http_server.py` serves the same tools
over streamable HTTP and SSE. With `ECHO_HANG_AT_START=1` the server never starts serving (a
connect timeout); with `ECHO_PID_FILE=<path>` it writes its pid there before serving, and
with `ECHO_ENV_FILE=<path>` its whole environment (JSON: what it inherited); with
`ECHO_WAIT_FOR=<path>` it serves only once that file exists (a slow start a test ends when
it chooses), and with `ECHO_CHILD_PID_FILE=<path>` too it first starts a long-lived child and
writes the child's pid there.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import anyio
import mcp_types as types
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def build_server(name: str = "echo") -> MCPServer:
    server = MCPServer(name, log_level="WARNING")

    @server.tool(
        description="Echo the text back.",
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Write a note (mutating, no hints).")
    def write_note(text: str) -> str:
        return f"noted: {text}"

    @server.tool(
        description="Wipe everything (destructive).",
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    def wipe(target: str) -> str:
        return f"wiped {target}"

    @server.tool(
        description="A 1x1 PNG and a caption.",
        annotations=types.ToolAnnotations(read_only_hint=True),
        structured_output=False,
    )
    def image() -> list[object]:
        return ["a red pixel", Image(data=PNG_1X1, format="png")]

    @server.tool(
        description="Embedded resources, text and binary.",
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    def resource() -> list[types.ContentBlock]:
        return [
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri="file:///notes/todo.md", mime_type="text/markdown", text="- buy milk"
                ),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///data/blob.bin",
                    mime_type="application/octet-stream",
                    blob=base64.b64encode(b"\x00" * 300).decode(),
                ),
            ),
        ]

    @server.tool(
        description="A very long text.", annotations=types.ToolAnnotations(read_only_hint=True)
    )
    def big(size: int) -> str:
        return "x" * size

    @server.tool(
        description="Always fails.", annotations=types.ToolAnnotations(read_only_hint=True)
    )
    def fail(reason: str = "it broke") -> str:
        raise ToolError(reason)

    @server.tool(description="Exit the server process in the middle of the call.")
    def crash() -> str:
        sys.stderr.write("echo_server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool(
        description="Never answer.", annotations=types.ToolAnnotations(read_only_hint=True)
    )
    async def hang() -> str:
        await anyio.sleep_forever()
        return "unreachable"

    @server.tool(
        description="The server's pid.", annotations=types.ToolAnnotations(read_only_hint=True)
    )
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="Start a long-lived child process; returns its pid.")
    def spawn_child() -> str:
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return str(child.pid)

    return server


def main() -> None:
    if pid_file := os.environ.get("ECHO_PID_FILE"):
        with open(pid_file, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
    if env_file := os.environ.get("ECHO_ENV_FILE"):
        with open(env_file, "w", encoding="utf-8") as f:
            json.dump(dict(os.environ), f)
    if wait_for := os.environ.get("ECHO_WAIT_FOR"):
        if child_pid_file := os.environ.get("ECHO_CHILD_PID_FILE"):
            child = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(120)"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            with open(child_pid_file, "w", encoding="utf-8") as f:
                f.write(str(child.pid))
        while not os.path.exists(wait_for):
            time.sleep(0.02)
    if os.environ.get("ECHO_HANG_AT_START") == "1":
        while True:
            time.sleep(3600)
    build_server(os.environ.get("ECHO_NAME", "echo")).run("stdio")


if __name__ == "__main__":
    main()
