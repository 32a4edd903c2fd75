"""A small threaded HTTP server on 127.0.0.1 for the fetch tool's tests.

Owns `WebServer`: pages of every kind the fetch tool must handle (HTML, JSON, long text, an
endless body, a compression bomb, binary, redirect chains, a slow page, an echo of the Host
header), and the record of every path it was asked for, so a test can prove a request was
never made.

Invariant: it binds only to 127.0.0.1 on an ephemeral port, and `close` stops it without
waiting for a handler that is still sending (the slow page waits on an event `close` sets).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

PAGE_HTML = (
    b"<!doctype html><html><head><title>The Page</title>"
    b"<style>body { color: red }</style><script>stealCookies()</script></head>"
    b"<body><h2>Section</h2><p>Some <b>bold</b> text and <a href='/other'>a link</a>.</p>"
    b"<ul><li>one</li><li>two</li></ul><pre><code>x = 1\n</code></pre></body></html>"
)
DATA_JSON = {"name": "defect", "tools": ["fetch"], "nested": {"ok": True}}
LONG_LINE = "the quick brown fox jumps over the lazy dog\n"
LONG_TEXT = LONG_LINE * 3000  # 132,000 characters
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\x00" * 2000


@functools.cache
def _bomb() -> bytes:
    """32 MiB of text in about 32 KiB of gzip: more than any download cap, once decoded."""
    return gzip.compress(b"a" * (32 * 1024 * 1024), compresslevel=9)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _send(self, status: int, body: bytes, content_type: str | None, **headers: str) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.hosts.append(self.headers.get("Host", ""))
        # The client may stop reading: that is the point of the endless bodies.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._route(path, query)

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        if path == "/page.html":
            self._send(200, PAGE_HTML, "text/html; charset=utf-8")
        elif path == "/missing.html":
            self._send(404, b"<html><body><h1>Not here</h1></body></html>", "text/html")
        elif path == "/data.json":
            self._send(200, json.dumps(DATA_JSON).encode(), "application/json")
        elif path == "/long.txt":
            self._send(200, LONG_TEXT.encode(), "text/plain; charset=utf-8")
        elif path == "/endless":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = b"x" * 65536
            for _ in range(200 * 16):  # up to 200 MiB, far more than any cap
                self.wfile.write(chunk)
                with self.server.lock:
                    self.server.endless_sent += len(chunk)
        elif path == "/bomb":
            self._send(200, _bomb(), "text/plain", Content_Encoding="gzip")
        elif path == "/image.png":
            self._send(200, PNG_BYTES, "image/png")
        elif path == "/unlabelled-binary":
            self._send(200, PNG_BYTES, "application/octet-stream")
        elif path == "/unlabelled-text":
            self._send(200, b"just words, no label\n", None)
        elif path == "/host":
            self._send(200, self.headers.get("Host", "").encode(), "text/plain")
        elif path.startswith("/hop/"):
            left = int(path.rsplit("/", 1)[1])
            target = "/page.html" if left <= 1 else f"/hop/{left - 1}"
            self._send(302, b"", "text/plain", Location=target)
        elif path == "/to":
            self._send(302, b"", "text/plain", Location=query["url"][0])
        elif path == "/slow":
            self.server.release.wait(30)
            self._send(200, b"late", "text/plain")
        else:
            self._send(404, b"no such page", "text/plain")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.lock = threading.Lock()
        self.paths: list[str] = []
        self.hosts: list[str] = []
        self.endless_sent = 0
        self.release = threading.Event()


class WebServer:
    """`with WebServer() as web:` … `web.url("/page.html")`; `tls`: serve https with it."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.scheme = "https" if tls is not None else "http"
        self._server = _Server(tls)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def netloc(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.netloc}{path}"

    @property
    def paths(self) -> list[str]:
        with self._server.lock:
            return list(self._server.paths)

    @property
    def hosts(self) -> list[str]:
        with self._server.lock:
            return list(self._server.hosts)

    @property
    def endless_sent(self) -> int:
        with self._server.lock:
            return self._server.endless_sent

    def __enter__(self) -> WebServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
