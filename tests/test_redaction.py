"""`defect_core/redaction.py`: secret-looking values out of what a process printed, out of a
command line and out of a URL, before any of it is shown, logged or stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from defect_core.mcp.connection import Connection
from defect_core.mcp.spec import McpServerSpec
from defect_core.redaction import REDACTED, high_entropy, redact, redact_args, redact_url

GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
ANTHROPIC = "sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"
RANDOM = "8f2aB91cD03eF4a5B6c7D8e9"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"token={GITHUB}", GITHUB),
        ("config: token=plainword", "plainword"),
        (f"using {GITHUB} from the environment", GITHUB),
        (f"key is {ANTHROPIC}", ANTHROPIC),
        ("sk-proj-" + "A1b2C3d4E5f6G7h8I9j0", "A1b2C3d4E5f6G7h8I9j0"),
        ("slack: xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
        ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
        ("Authorization: Bearer eyJhbGciOi.payload.sig", "eyJhbGciOi.payload.sig"),
        ("sent Bearer abcdef123456 upstream", "abcdef123456"),
        ("password=hunter2", "hunter2"),
        ("PGPASSWORD: 's3cr3t pass'", "s3cr3t pass"),
        ('{"api_key": "abc def ghi", "port": 8080}', "abc def ghi"),
        ("export GITHUB_TOKEN=abc123", "abc123"),
        ("client_secret=shh-quiet", "shh-quiet"),
        ("GET https://h.example/mcp?token=qwerty&x=1", "qwerty"),
        ("clone https://bob:pa55word@git.example/repo", "pa55word"),
        (f"--token {RANDOM}", RANDOM),
        (f"secret {RANDOM} loaded", RANDOM),
        (f"the signing key: {RANDOM}", RANDOM),
    ],
)
def test_secret_looking_values_are_replaced(text: str, secret: str) -> None:
    redacted = redact(text)
    assert secret not in redacted
    assert REDACTED in redacted
    assert redact(redacted) == redacted, "redacting twice changes nothing"


@pytest.mark.parametrize(
    "text",
    [
        "broken_server: cannot load config: no such file: settings.toml",
        "the author=Jane Doe wrote 3 files",
        "listening on http://127.0.0.1:8080/mcp",
        "Traceback (most recent call last): KeyError: 'name'",
        "a key of the table was missing",
        "commit 3f2c1a9 fixed the tokenizer",
    ],
)
def test_text_without_secrets_is_left_as_it_is(text: str) -> None:
    assert redact(text) == text


def test_the_known_values_go_wherever_they_appear_and_short_ones_stay() -> None:
    text = "loaded value-of-the-secret (twice: value-of-the-secret), flag 1, mode on"
    redacted = redact(text, ["value-of-the-secret", "1", "on"])
    assert redacted == f"loaded {REDACTED} (twice: {REDACTED}), flag 1, mode on"


def test_a_known_value_inside_a_longer_one_does_not_leave_a_tail() -> None:
    assert redact("x=abcdefghij", ["abcdef", "abcdefghij"]) == f"x={REDACTED}"


def test_high_entropy_tells_random_tokens_from_words_and_numbers() -> None:
    assert high_entropy(RANDOM)
    assert not high_entropy("configuration_file_name")
    assert not high_entropy("12345678901234567890")
    assert not high_entropy("aB3", min_length=16)


def test_a_command_line_keeps_its_shape_and_loses_its_secrets() -> None:
    args = [
        "server.py",
        "--token",
        "plain-but-after-a-secret-flag",
        f"--api-key={RANDOM}",
        "--port",
        "8080",
        GITHUB,
        RANDOM,
        "@modelcontextprotocol/server-github",
        "/home/ana/servers/a1B2c3D4e5F6g7H8i9J0k1L2.py",
    ]
    assert redact_args(args) == [
        "server.py",
        "--token",
        REDACTED,
        f"--api-key={REDACTED}",
        "--port",
        "8080",
        REDACTED,
        REDACTED,
        "@modelcontextprotocol/server-github",
        "/home/ana/servers/a1B2c3D4e5F6g7H8i9J0k1L2.py",
    ]


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        (
            "https://user:pw@mcp.example.com:8443/v1/mcp?token=abc&mode=fast#frag",
            f"https://mcp.example.com:8443/v1/mcp?token={REDACTED}&mode={REDACTED}",
        ),
        (f"https://mcp.example.com/t/{GITHUB}/sse", f"https://mcp.example.com/t/{REDACTED}/sse"),
        ("http://[::1]:8080/mcp", "http://[::1]:8080/mcp"),
        ("http://127.0.0.1:8811/mcp", "http://127.0.0.1:8811/mcp"),
        ("not a url, token=abc", f"not a url, token={REDACTED}"),
        ("http://host:99999999/", REDACTED),
    ],
)
def test_a_url_keeps_where_it_goes_and_nothing_that_opens_it(url: str, kept: str) -> None:
    assert redact_url(url) == kept


def test_a_path_with_a_secret_looking_word_in_it_is_not_a_secret() -> None:
    for text in (
        "/srv/secrets33/tests/mcp_servers/echo_server.py",
        "keys: /home/ana/.ssh/id_ed25519",
    ):
        assert redact(text) == text


@pytest.mark.anyio
async def test_an_mcp_connection_knows_its_servers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a connection redacts (a failure, a lost server, a failed call's error): the
    values of defect's secret variables, and the server's own env, header and URL values."""
    monkeypatch.setenv("FOO_TOKEN", "foo-token-value")
    http = McpServerSpec(
        name="docs",
        transport="http",
        url="https://u:urlpass1@docs.example/mcp?key=query-value-1",
        headers=(("X-Account", "header-value-1"),),
    )
    stdio = McpServerSpec(
        name="gh", transport="stdio", command="x", env=(("ACCOUNT", "acct-0042"),)
    )
    said = (
        "Client error '401' for url 'https://u:urlpass1@docs.example/mcp?key=query-value-1'"
        " (account header-value-1, acct-0042, foo-token-value)"
    )
    for spec, gone in ((http, "query-value-1"), (stdio, "acct-0042")):
        redacted = Connection(spec, Path.cwd()).redact(said)
        assert gone not in redacted and "foo-token-value" not in redacted
    assert "header-value-1" not in Connection(http, Path.cwd()).redact(said)
    assert "urlpass1" not in Connection(http, Path.cwd()).redact(said)
