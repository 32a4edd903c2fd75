"""The echo server's tools over HTTP, for defect's tests: streamable HTTP and SSE at once.

Owns one process serving two apps of the official SDK on 127.0.0.1, each on its own ephemeral
port: `<base>/mcp` (streamable HTTP) and `<base>/sse` (SSE). When both listen it prints one
line per transport to stdout — `streamable-http http://127.0.0.1:PORT/mcp` and
`sse http://127.0.0.1:PORT/sse` — so the test that started it knows where to connect.

With `--token T` every request must carry `Authorization: Bearer T` (a 401 otherwise): the
tests check that configured headers reach the server.

Run: `python tests/mcp_servers/http_server.py [--token T]`; it serves until killed.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

import anyio
import uvicorn
from echo_server import build_server

Scope = dict[str, Any]


class RequireToken:
    """ASGI middleware: refuse HTTP requests without the expected bearer token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and dict(scope["headers"]).get(b"authorization") != self.expected
        ):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"missing or wrong token"})
            return
        await self.app(scope, receive, send)


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


async def serve(token: str | None) -> None:
    apps = {
        "streamable-http": (build_server("echo-http").streamable_http_app(), "/mcp"),
        "sse": (build_server("echo-sse").sse_app(), "/sse"),
    }
    servers = []
    lines = []
    for transport, (app, path) in apps.items():
        sock = _listen()
        asgi = RequireToken(app, token) if token else app
        config = uvicorn.Config(asgi, log_level="warning", lifespan="on")
        servers.append((uvicorn.Server(config), sock))
        lines.append(f"{transport} http://127.0.0.1:{sock.getsockname()[1]}{path}")
    async with anyio.create_task_group() as tg:
        for server, sock in servers:
            tg.start_soon(lambda s=server, k=sock: s.serve(sockets=[k]))
        while not all(server.started for server, _ in servers):
            await anyio.sleep(0.01)
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--token")
    args = parser.parse_args()
    anyio.run(serve, args.token)


if __name__ == "__main__":
    main()
