"""The fetch tool against a real HTTP server on 127.0.0.1, and its guard against SSRF.

Conversion (Markdown, text, raw, JSON), the result budget and its note, the download cap
(an endless body, a compression bomb), the timeout, binary refusal, the redirect limit; the
guard: loopback refused by default, a redirect to loopback refused, a name resolving to a
private address refused (resolver injected at the guard's boundary; the real resolver for
`localhost`), metadata addresses and names refused, the allow-list opening one host:port,
and the connection pinned to the address that was checked.
"""

from __future__ import annotations

import ipaddress
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from defect_core.config import ConfigError, parse_layer
from defect_core.session.toolset import default_tools
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import Safety, ToolContext, ToolError
from defect_core.tools.fetch import (
    MAX_REDIRECTS,
    MAX_RESULT_CHARS,
    FetchArgs,
    FetchTool,
    host_key,
)
from defect_core.tools.netguard import (
    AllowEntry,
    NetGuard,
    Refused,
    blocked_reason,
    system_resolve,
)
from tests.support.tls import self_signed
from tests.support.web_server import DATA_JSON, LONG_TEXT, WebServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def web() -> Iterator[WebServer]:
    with WebServer() as server:
        yield server


def ctx(tmp_path: Path, *allow: str) -> ToolContext:
    return ToolContext(
        session_id="s1",
        cwd=tmp_path,
        fs=LocalFsBackend(),
        shell=LocalShellBackend(),
        fetch_allow=allow,
    )


class FakeDns:
    """A resolver for the guard's boundary: fixed answers, and a log of every question."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        if host not in self.answers:
            raise OSError(f"no such host: {host}")
        return self.answers[host]


async def fetch(tmp_path: Path, web: WebServer, path: str, **args: object) -> str:
    out = await FetchTool().run({"url": web.url(path), **args}, ctx(tmp_path, web.netloc))
    assert isinstance(out.content, str)
    assert not out.is_error, out.content
    return out.content


# --- the tool --------------------------------------------------------------------------------


def test_fetch_is_a_builtin_tool_with_a_schema_from_its_model() -> None:
    tool = next(t for t in default_tools() if t.name == "fetch")
    schema = tool.input_schema
    derived = FetchArgs.model_json_schema()
    assert schema["properties"].keys() == derived["properties"].keys()
    assert schema["required"] == ["url"] and schema["type"] == "object"
    assert schema["properties"]["format"]["enum"] == ["markdown", "text", "raw"]
    assert tool.kind == "fetch" and tool.safety is Safety.MUTATING


def test_title_shows_the_url_and_the_permission_key_is_the_host(tmp_path: Path) -> None:
    tool = FetchTool()
    view = tool.describe({"url": "https://example.com/a/b?c=1"}, ctx(tmp_path))
    assert view.title == "Fetch https://example.com/a/b?c=1" and view.kind == "fetch"
    assert tool.permission_key({"url": "https://Example.COM/a/b?c=1"}) == "example.com"
    assert tool.permission_key({"url": "https://example.com:443/x"}) == "example.com"
    assert tool.permission_key({"url": "http://127.0.0.1:8080/x"}) == "127.0.0.1:8080"
    assert host_key("http://[::1]:81/") == "[::1]:81"
    assert tool.permission_key({"url": 3}) == "fetch"


async def test_html_becomes_markdown_with_absolute_links_and_no_scripts(
    tmp_path: Path, web: WebServer
) -> None:
    text = await fetch(tmp_path, web, "/page.html")
    assert text.startswith(f"{web.url('/page.html')} — HTTP 200 OK (text/html")
    assert "# The Page" in text
    assert "## Section" in text
    assert "Some **bold** text and [a link](" + web.url("/other") + ")." in text
    assert "- one\n- two" in text
    assert "```\nx = 1\n```" in text
    assert "stealCookies" not in text and "color: red" not in text and "<h2>" not in text


async def test_text_and_raw_formats(tmp_path: Path, web: WebServer) -> None:
    text = await fetch(tmp_path, web, "/page.html", format="text")
    body = text.split("\n\n", 1)[1]
    assert body.startswith("The Page\n\nSection")
    assert "bold" in body and "a link" in body and "one\ntwo" in body
    assert "##" not in text and "**" not in text and "<p>" not in text
    raw = await fetch(tmp_path, web, "/page.html", format="raw")
    assert "<h2>Section</h2>" in raw and "stealCookies()" in raw


async def test_json_and_unlabelled_text_pass_through(tmp_path: Path, web: WebServer) -> None:
    text = await fetch(tmp_path, web, "/data.json")
    assert json.loads(text.split("\n\n", 1)[1]) == DATA_JSON
    plain = await fetch(tmp_path, web, "/unlabelled-text")
    assert plain.endswith("just words, no label")


async def test_long_content_is_cut_with_a_note_and_offset_reads_on(
    tmp_path: Path, web: WebServer
) -> None:
    first = await fetch(tmp_path, web, "/long.txt")
    total = len(LONG_TEXT)
    cut = total - MAX_RESULT_CHARS
    assert f"[truncated: {cut} more characters were cut" in first
    assert f'"offset": {MAX_RESULT_CHARS}' in first
    body = first.split("\n\n", 1)[1].split("\n\n[showing")[0]
    assert body == LONG_TEXT[:MAX_RESULT_CHARS]
    rest = await fetch(tmp_path, web, "/long.txt", offset=MAX_RESULT_CHARS * 3)
    assert f"[showing characters {MAX_RESULT_CHARS * 3}–{total} of {total}]" in rest
    assert "truncated" not in rest
    assert LONG_TEXT[MAX_RESULT_CHARS * 3 :].strip() in rest


async def test_an_endless_body_stops_at_the_download_cap(tmp_path: Path, web: WebServer) -> None:
    out = await FetchTool().run(
        {"url": web.url("/endless"), "max_bytes": 300_000}, ctx(tmp_path, web.netloc)
    )
    assert isinstance(out.content, str)
    assert "(text/plain, 300000 bytes)" in out.content
    assert "only the first 300000 were downloaded" in out.content
    assert 'pass a larger "max_bytes"' in out.content
    assert out.raw_output["bytes"] == 300_000
    assert web.endless_sent < 200 * 1024 * 1024, "the download stopped before the body's end"


async def test_a_compression_bomb_is_decoded_only_up_to_the_cap(
    tmp_path: Path, web: WebServer
) -> None:
    text = await fetch(tmp_path, web, "/bomb", max_bytes=1_000_000)
    assert "(text/plain, 1000000 bytes)" in text
    assert "only the first 1000000 were downloaded" in text


async def test_a_slow_server_times_out(tmp_path: Path, web: WebServer) -> None:
    with pytest.raises(ToolError, match=r"timed out after 0.5 s fetching .*/slow"):
        await FetchTool().run({"url": web.url("/slow"), "timeout": 0.5}, ctx(tmp_path, web.netloc))


async def test_binary_content_is_refused(tmp_path: Path, web: WebServer) -> None:
    with pytest.raises(ToolError, match=r"binary content \(image/png, 2008 bytes\)"):
        await fetch(tmp_path, web, "/image.png")
    with pytest.raises(ToolError, match=r"binary content \(application/octet-stream"):
        await fetch(tmp_path, web, "/unlabelled-binary")


async def test_redirects_are_followed_up_to_the_limit(tmp_path: Path, web: WebServer) -> None:
    text = await fetch(tmp_path, web, f"/hop/{MAX_REDIRECTS}")
    assert "## Section" in text and f"redirected from {web.url(f'/hop/{MAX_REDIRECTS}')}" in text
    assert web.paths == [f"/hop/{n}" for n in range(MAX_REDIRECTS, 0, -1)] + ["/page.html"]
    with pytest.raises(ToolError, match=rf"too many redirects \(more than {MAX_REDIRECTS}\)"):
        await fetch(tmp_path, web, f"/hop/{MAX_REDIRECTS + 1}")
    assert web.paths[MAX_REDIRECTS + 1 :] == [f"/hop/{n}" for n in range(MAX_REDIRECTS + 1, 0, -1)]


async def test_an_error_status_returns_the_page_as_a_failure(
    tmp_path: Path, web: WebServer
) -> None:
    out = await FetchTool().run({"url": web.url("/missing.html")}, ctx(tmp_path, web.netloc))
    assert out.is_error and isinstance(out.content, str)
    assert "HTTP 404 Not Found" in out.content and "# Not here" in out.content


async def test_only_http_and_https_urls(tmp_path: Path) -> None:
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://x/", "not a url"):
        with pytest.raises(ToolError, match=r"http:// and https://|not a valid URL|no host"):
            await FetchTool().run({"url": url}, ctx(tmp_path))


# --- the guard -------------------------------------------------------------------------------


async def test_loopback_is_refused_by_default_and_nothing_is_requested(
    tmp_path: Path, web: WebServer
) -> None:
    with pytest.raises(Refused, match=r"127\.0\.0\.1 is a loopback address"):
        await FetchTool().run({"url": web.url("/page.html")}, ctx(tmp_path))
    assert web.paths == []


async def test_the_allow_list_opens_exactly_that_host_and_port(
    tmp_path: Path, web: WebServer
) -> None:
    out = await FetchTool().run({"url": web.url("/data.json")}, ctx(tmp_path, web.netloc))
    assert not out.is_error
    other_port = "127.0.0.1:1" if web.port != 1 else "127.0.0.1:2"
    with pytest.raises(Refused):
        await FetchTool().run({"url": web.url("/data.json")}, ctx(tmp_path, other_port))
    assert web.paths == ["/data.json"]


async def test_a_redirect_from_an_allowed_host_to_loopback_is_refused(
    tmp_path: Path, web: WebServer
) -> None:
    dns = FakeDns({"public.test": ["127.0.0.1"]})
    tool = FetchTool(resolve=dns)
    start = f"http://public.test:{web.port}/to?url={web.url('/page.html')}"
    with pytest.raises(Refused, match=r"127\.0\.0\.1 is a loopback address"):
        await tool.run({"url": start}, ctx(tmp_path, f"public.test:{web.port}"))
    assert [p.split("?")[0] for p in web.paths] == ["/to"], "the redirect target was not fetched"


async def test_the_connection_is_pinned_to_the_checked_address(
    tmp_path: Path, web: WebServer
) -> None:
    # `pinned.test` exists in no DNS: the request can only reach the server through the
    # address the guard resolved, once, while the Host header keeps the name.
    dns = FakeDns({"pinned.test": ["127.0.0.1"]})
    out = await FetchTool(resolve=dns).run(
        {"url": f"http://pinned.test:{web.port}/host"}, ctx(tmp_path, f"pinned.test:{web.port}")
    )
    assert isinstance(out.content, str) and out.content.endswith(f"pinned.test:{web.port}")
    assert dns.asked == [("pinned.test", web.port)]
    assert web.hosts == [f"pinned.test:{web.port}"]


async def test_a_name_with_any_private_address_is_refused() -> None:
    dns = FakeDns(
        {
            "intranet.test": ["10.1.2.3"],
            "mixed.test": ["93.184.215.14", "192.168.0.7"],
            "public.test": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
        }
    )
    guard = NetGuard(resolve=dns)
    with pytest.raises(Refused, match=r"intranet.test resolves to 10.1.2.3, a private address"):
        await guard.vet("intranet.test", 80)
    with pytest.raises(Refused, match=r"192.168.0.7, a private address"):
        await guard.vet("mixed.test", 443)
    target = await guard.vet("public.test", 443)
    assert target.address == "93.184.215.14" and target.host == "public.test"
    with pytest.raises(ToolError, match=r"cannot resolve the host nowhere.test"):
        await guard.vet("nowhere.test", 80)


async def test_the_real_resolver_runs_by_default_and_localhost_is_refused(
    tmp_path: Path, web: WebServer
) -> None:
    assert set(await system_resolve("localhost", 80)) & {"127.0.0.1", "::1"}
    with pytest.raises(Refused, match=r"localhost resolves to .*a loopback address"):
        await FetchTool().run({"url": f"http://localhost:{web.port}/"}, ctx(tmp_path))
    assert web.paths == []


async def test_metadata_addresses_and_names_are_refused() -> None:
    async def never(host: str, port: int) -> list[str]:
        raise AssertionError(f"{host} must be refused before any lookup")

    guard = NetGuard(resolve=never)
    for host in ("169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254"):
        with pytest.raises(Refused, match=r"a cloud metadata address"):
            await guard.vet(host, 80)
    for name in ("metadata.google.internal", "METADATA.google.internal."):
        with pytest.raises(Refused, match=r"a cloud metadata host"):
            await guard.vet(name, 80)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.2", "loopback"),
        ("::1", "loopback"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "unique-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("100.64.0.1", "not a public one"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::7f00:1", "loopback"),
    ],
)
def test_non_public_addresses_are_blocked(address: str, reason: str) -> None:
    found = blocked_reason(ipaddress.ip_address(address))
    assert found is not None and reason in found


def test_public_addresses_pass() -> None:
    for address in ("93.184.215.14", "1.1.1.1", "2606:4700:4700::1111"):
        assert blocked_reason(ipaddress.ip_address(address)) is None


def test_allow_entries_parse_and_bad_ones_are_refused() -> None:
    assert AllowEntry.parse("127.0.0.1:8080") == AllowEntry("127.0.0.1", 8080)
    assert AllowEntry.parse("Intranet.Example") == AllowEntry("intranet.example", None)
    assert AllowEntry.parse("[::1]:81") == AllowEntry("::1", 81)
    assert AllowEntry.parse("::1") == AllowEntry("::1", None)
    for bad in ("a:b:c", "host:99999", "http://x/", "", "[::1"):
        with pytest.raises(ValueError):
            AllowEntry.parse(bad)
    with pytest.raises(ToolError, match=r"\[fetch\] allow"):
        NetGuard(["host:port"])


def test_the_allow_list_is_a_config_key() -> None:
    layer = parse_layer({"fetch": {"allow": ["127.0.0.1:8080", "intranet.example"]}}, "c.toml")
    assert layer == {"fetch_allow_hosts": ("127.0.0.1:8080", "intranet.example")}
    with pytest.raises(ConfigError, match=r"fetch.allow: 'http://x/' is not"):
        parse_layer({"fetch": {"allow": ["http://x/"]}}, "c.toml")
    with pytest.raises(ConfigError, match=r"fetch.allow: must be a list"):
        parse_layer({"fetch": {"allow": "127.0.0.1"}}, "c.toml")


def test_offering_the_tool_loads_no_http_client_nor_html_parser() -> None:
    """Sessions build their tools on `session/new`: that path stays light."""
    code = (
        "import sys\n"
        "from defect_core.session.toolset import default_tools\n"
        "tools = {t.name: t for t in default_tools()}\n"
        "tools['fetch'].input_schema; tools['fetch'].describe({'url': 'https://x.org/'}, None)\n"
        "heavy = [m for m in ('httpx2', 'httpcore2', 'bs4', 'markdownify') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=repo, timeout=30)


def _certificate(tmp_path: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it) for a self-signed certificate of `name`."""
    made = self_signed(tmp_path, name)
    return made.server, made.trust


async def test_https_to_the_pinned_address_checks_the_certificate_against_the_host(
    tmp_path: Path,
) -> None:
    # Connected to 127.0.0.1, yet the TLS name and the certificate check are `secure.test`'s.
    server_tls, trust = _certificate(tmp_path, "secure.test")
    with WebServer(tls=server_tls) as web:
        dns = FakeDns({"secure.test": ["127.0.0.1"], "impostor.test": ["127.0.0.1"]})
        tool = FetchTool(resolve=dns, verify=trust)
        allow = ctx(tmp_path, f"secure.test:{web.port}", f"impostor.test:{web.port}")
        out = await tool.run({"url": f"https://secure.test:{web.port}/host"}, allow)
        assert isinstance(out.content, str) and out.content.endswith(f"secure.test:{web.port}")
        with pytest.raises(ToolError, match=r"could not fetch .*(certificate|hostname)"):
            await tool.run({"url": f"https://impostor.test:{web.port}/host"}, allow)
        assert web.hosts == [f"secure.test:{web.port}"]
