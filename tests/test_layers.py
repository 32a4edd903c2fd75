"""The import layers of docs/layers.md hold, and the contracts that state them can fail.

Runs the real `lint-imports` (import-linter, configured in pyproject.toml) on the repository,
then on copies of the packages with one forbidden import injected each — at module level,
inside a function, under `TYPE_CHECKING` — and checks that the contract it breaks reports
it broken. A contract that could not fail would prove nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("defect_core", "defect_acp", "defect_cli", "defect_fakeapi", "defect_transcript")

PACKAGE_LAYERS = (
    "The packages are layered: the command, the transcript tool, the ACP bridge, the runtime"
)
LAYERS = "defect_core is layered: no import runs back up (docs/layers.md)"
SESSION_LAYERS = "The session package is layered: core, state, its parts, protocol"
MCP_LAYERS = "The MCP package is layered: hub, tool, connection | convert | elicitation, spec"
STORE_LAYERS = (
    "The store package is layered: door | sqlite, writer | transactions | migrations | rows | "
    "protocol, the values"
)
NO_ACP = "defect_core never imports the ACP bridge, the ACP SDK nor the fake API"
TOOLS = "Tools never import the session, the runtime nor the turn machinery"
PROVIDERS = "Providers never import the tools, the session, the runtime nor the turn machinery"
FAKE_API = "The fake API judges the wire on its own: defect_fakeapi imports no defect code"
FAKE_API_LAYERS = (
    "The fake API is layered: cli, server, http, its rules and encodings, the script, the cache"
)
CONFIG_LAYERS = (
    "The configuration is layered: resolve, files | overrides, providers, capabilities, keys, "
    "settings"
)
PROVIDER_LAYERS = "The providers are layered: registry, each provider, the Messages wire, base"
ANTHROPIC_LAYERS = (
    "The Anthropic provider is layered: provider, client | stream | listing, "
    "errors | request, catalog"
)
TURN_LAYERS = "The turn package is layered: runner, request | call_steps, deps"
OPENAI_LAYERS = "The OpenAI-compatible provider is layered: provider, request | assemble, errors"
TRANSCRIPT = (
    "The transcript tool is a client: it reaches defect acp only over stdio (defect_acp.client)"
)
CHECKPOINT_LAYERS = (
    "The checkpoints package is layered: restore | fs, capture, gitsnap | blobs | budget, model"
)
INTEGRITY_LAYERS = "The outbound repair is layered: repair, proven, validate, rules"
AGENTS_LAYERS = "The agents package is layered: delegation, tools, tasks | child, progress"
BRIDGE_DOOR = "The ACP bridge reaches the runtime only through the session door"
CONTRACTS = (
    PACKAGE_LAYERS,
    LAYERS,
    SESSION_LAYERS,
    MCP_LAYERS,
    STORE_LAYERS,
    NO_ACP,
    TOOLS,
    PROVIDERS,
    FAKE_API,
    FAKE_API_LAYERS,
    CONFIG_LAYERS,
    PROVIDER_LAYERS,
    ANTHROPIC_LAYERS,
    OPENAI_LAYERS,
    TURN_LAYERS,
    TRANSCRIPT,
    CHECKPOINT_LAYERS,
    INTEGRITY_LAYERS,
    AGENTS_LAYERS,
    BRIDGE_DOOR,
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # A wide terminal keeps each contract's name and verdict on one line.
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_of_the_packages(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root)
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("*.pyc"))
    return root


def test_the_repository_keeps_every_import_contract() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    for contract in CONTRACTS:
        assert f"{contract} KEPT" in result.stdout


@pytest.mark.parametrize(
    ("module", "code", "contract", "edge"),
    [
        pytest.param(
            "defect_acp/server.py",
            "\n\ndef _upward() -> None:\n    from defect_cli.wiring import acp_core\n",
            PACKAGE_LAYERS,
            "defect_acp.server -> defect_cli.wiring",
            id="bridge-imports-the-command-that-wires-it-lazily",
        ),
        pytest.param(
            "defect_acp/updates.py",
            "\nfrom defect_core.store import ToolCallRecord\n",
            BRIDGE_DOOR,
            "defect_acp.updates -> defect_core.store",
            id="bridge-reads-the-store-behind-the-door",
        ),
        pytest.param(
            "defect_acp/server.py",
            "\n\ndef _runtime() -> None:\n    from defect_core.session import DefaultAgentCore\n",
            BRIDGE_DOOR,
            "defect_acp.server -> defect_core.session",
            id="bridge-names-the-runtime-behind-the-door-lazily",
        ),
        pytest.param(
            "defect_core/model.py",
            "\n\ndef _upward() -> None:\n"
            "    from defect_core.session.core import DefaultAgentCore\n",
            LAYERS,
            "defect_core.model -> defect_core.session.core",
            id="lazy-import-from-the-bottom-layer-to-the-top",
        ),
        pytest.param(
            "defect_core/session/protocol.py",
            "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            "    from defect_core.session.state import DefaultSession\n",
            SESSION_LAYERS,
            "defect_core.session.protocol -> defect_core.session.state",
            id="session-door-names-its-implementation-for-type-checking",
        ),
        pytest.param(
            "defect_core/session/titles.py",
            "\n\ndef _sibling() -> None:\n"
            "    from defect_core.session.commands import parse_slash_command\n",
            SESSION_LAYERS,
            "defect_core.session.titles -> defect_core.session.commands",
            id="session-part-imports-a-sibling-lazily",
        ),
        pytest.param(
            "defect_core/mcp/spec.py",
            "\nfrom defect_core.mcp.hub import McpHub\n",
            MCP_LAYERS,
            "defect_core.mcp.spec -> defect_core.mcp.hub",
            id="mcp-spec-imports-its-hub",
        ),
        pytest.param(
            "defect_core/store/migrations.py",
            "\n\ndef _reopen() -> None:\n    from defect_core.store.sqlite import SqliteStore\n",
            STORE_LAYERS,
            "defect_core.store.migrations -> defect_core.store.sqlite",
            id="store-migrations-import-the-store-lazily",
        ),
        pytest.param(
            "defect_core/log.py",
            "\n\ndef _bridge() -> None:\n    import acp\n",
            NO_ACP,
            "defect_core.log -> acp",
            id="core-imports-the-acp-sdk-lazily",
        ),
        pytest.param(
            "defect_core/tools/beneath.py",
            "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            "    from defect_core.turn import TurnRunner\n",
            TOOLS,
            "defect_core.tools.beneath -> defect_core.turn",
            id="tool-imports-the-turn-runner-for-type-checking",
        ),
        pytest.param(
            "defect_core/providers/scripted.py",
            "\nfrom defect_core.tools.base import Safety\n",
            PROVIDERS,
            "defect_core.providers.scripted -> defect_core.tools.base",
            id="provider-imports-a-tool",
        ),
        pytest.param(
            "defect_core/config/settings.py",
            "\n\ndef _reload() -> None:\n    from defect_core.config.files import read_file\n",
            CONFIG_LAYERS,
            "defect_core.config.settings -> defect_core.config.files",
            id="settings-model-imports-the-file-reader-lazily",
        ),
        pytest.param(
            "defect_core/providers/base.py",
            "\n\ndef _offline() -> None:\n"
            "    from defect_core.providers.scripted import ScriptedProvider\n",
            PROVIDER_LAYERS,
            "defect_core.providers.base -> defect_core.providers.scripted",
            id="provider-protocol-imports-a-provider-lazily",
        ),
        pytest.param(
            "defect_core/providers/anthropic/stream.py",
            "\n\ndef _upward() -> None:\n"
            "    from defect_core.providers.anthropic.provider import AnthropicProvider\n",
            ANTHROPIC_LAYERS,
            "defect_core.providers.anthropic.stream -> defect_core.providers.anthropic.provider",
            id="stream-assembler-imports-its-provider",
        ),
        pytest.param(
            "defect_core/providers/openai_compat/errors.py",
            "\n\ndef _upward() -> None:\n"
            "    from defect_core.providers.openai_compat.assemble import ChatAssembler\n",
            OPENAI_LAYERS,
            "defect_core.providers.openai_compat.errors -> "
            "defect_core.providers.openai_compat.assemble",
            id="chat-errors-import-the-assembler",
        ),
        pytest.param(
            "defect_core/providers/openai_wire.py",
            "\n\ndef _sibling() -> None:\n"
            "    from defect_core.providers.anthropic_wire import encode_messages\n",
            PROVIDER_LAYERS,
            "defect_core.providers.openai_wire -> defect_core.providers.anthropic_wire",
            id="one-wire-imports-the-other",
        ),
        pytest.param(
            "defect_core/turn/call_steps.py",
            "\nfrom defect_core.turn.request import build_request\n",
            TURN_LAYERS,
            "defect_core.turn.call_steps -> defect_core.turn.request",
            id="tool-calls-import-the-model-request",
        ),
        pytest.param(
            "defect_fakeapi/script.py",
            "\nfrom defect_core.model import Message\n",
            FAKE_API,
            "defect_fakeapi.script -> defect_core.model",
            id="fake-api-imports-the-runtime-it-judges",
        ),
        pytest.param(
            "defect_fakeapi/http.py",
            "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            "    from defect_fakeapi.server import FakeProvider\n",
            FAKE_API_LAYERS,
            "defect_fakeapi.http -> defect_fakeapi.server",
            id="fake-api-handler-names-its-provider-for-type-checking",
        ),
        pytest.param(
            "defect_core/catalog/places.py",
            "\nfrom defect_core.config import load_settings\n",
            LAYERS,
            "defect_core.catalog.places -> defect_core.config",
            id="catalog-imports-the-configuration",
        ),
        pytest.param(
            "defect_transcript/steps.py",
            "\n\ndef _inside() -> None:\n    from defect_acp.server import DefectAgent\n",
            TRANSCRIPT,
            "defect_transcript.steps -> defect_acp.server",
            id="transcript-tool-imports-the-server-lazily",
        ),
        pytest.param(
            "defect_acp/client.py",
            "\nfrom acp import schema\n",
            TRANSCRIPT,
            "defect_acp.client -> acp",
            id="shared-client-imports-the-acp-sdk",
        ),
        pytest.param(
            "defect_core/agents/progress.py",
            "\n\ndef _upward() -> None:\n"
            "    from defect_core.agents.tasks import BackgroundTasks\n",
            AGENTS_LAYERS,
            "defect_core.agents.progress -> defect_core.agents.tasks",
            id="subagent-progress-imports-the-task-table-lazily",
        ),
    ],
)
def test_an_injected_import_breaks_its_contract(
    tmp_path: Path, module: str, code: str, contract: str, edge: str
) -> None:
    root = copy_of_the_packages(tmp_path)
    with (root / module).open("a", encoding="utf-8") as file:
        file.write(code)
    result = lint_imports(root)
    assert result.returncode != 0, result.stdout + result.stderr
    assert f"{contract} BROKEN" in result.stdout, result.stdout
    assert edge in result.stdout, result.stdout
