"""The provider presets of docs/providers-openai.md, each held to the transcript that plays it.

Every preset block of the page ("## Presets": a whole `config.toml` naming its `provider`)
has a transcript `tests/transcripts/preset_NAME.jsonl` (played by `tests/test_transcripts.py`
against the strict fake Chat Completions API) whose user configuration is that very block,
its `base_url` alone pointed at the fake; and the fake plays that server: the key the block
names (or none, for a local server), the field its reasoning streams in, models that take
`reasoning_effort` exactly where the block says `reasoning = true`. Each block's `base_url` is
the vendor's documented default. So an example in the docs cannot drift from what is tested.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from defect_transcript import Transcript, load_transcript
from tests.support.doc_checks import code_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "providers-openai.md"
TRANSCRIPTS = ROOT / "tests" / "transcripts"
CONFIG = "xdg/defect/config.toml"
FAKE_URL = "${provider_url}/v1"

BASE_URLS = {
    "gpt": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com",
    "openrouter": "https://openrouter.ai/api/v1",
    "ollama": "http://localhost:11434/v1",
    "lmstudio": "http://localhost:1234/v1",
    "llamacpp": "http://localhost:8080/v1",
    "vllm": "http://localhost:8000/v1",
}
"""Each preset's vendor default, as its documentation gives it."""

REASONING_FIELDS = {"openrouter": "reasoning"}
"""The presets whose server streams reasoning in a field other than `reasoning_content`."""

LOCAL = {"ollama", "lmstudio", "llamacpp", "vllm"}


def preset_blocks() -> dict[str, str]:
    """The page's preset blocks by provider name (the blocks after "## Presets")."""
    text = PAGE.read_text(encoding="utf-8")
    presets = text.split("\n## Presets\n", 1)[1]
    blocks: dict[str, str] = {}
    for language, body in code_blocks(presets):
        if language == "toml":
            name = tomllib.loads(body)["provider"]
            assert name not in blocks, f"two preset blocks for {name}"
            blocks[name] = body
    return blocks


BLOCKS = preset_blocks()


def flags(transcript: Transcript) -> dict[str, str | None]:
    """The `defect fake-api` flags of a transcript's `provider_fake.args` (None: a switch)."""
    assert transcript.header.provider_fake is not None
    args: list[str] = transcript.header.provider_fake["args"]
    out: dict[str, str | None] = {}
    for n, arg in enumerate(args):
        if arg.startswith("--"):
            following = args[n + 1] if n + 1 < len(args) else "--"
            out[arg] = None if following.startswith("--") else following
    return out


def names(listed: str | None) -> set[str]:
    return {name for name in (listed or "").split(",") if name}


def test_every_preset_the_task_names_is_documented_and_played() -> None:
    assert set(BLOCKS) == set(BASE_URLS)
    played = {p.stem.removeprefix("preset_") for p in TRANSCRIPTS.glob("preset_*.jsonl")}
    assert played == set(BLOCKS)


@pytest.mark.parametrize("name", sorted(BASE_URLS))
def test_the_transcript_runs_the_documented_block(name: str) -> None:
    block = BLOCKS[name]
    table: dict[str, Any] = tomllib.loads(block)["providers"][name]
    assert table["kind"] == "openai"
    assert table["base_url"] == BASE_URLS[name]
    transcript = load_transcript(TRANSCRIPTS / f"preset_{name}.jsonl")
    played = transcript.header.files[CONFIG]
    line = re.compile(r'^base_url = "[^"]*"', re.M)
    assert len(line.findall(block)) == 1, "one base_url line, the one the transcript replaces"
    assert played == line.sub(f'base_url = "{FAKE_URL}"', block), (
        f"tests/transcripts/preset_{name}.jsonl must play the block of {PAGE.name} as it is"
    )


@pytest.mark.parametrize("name", sorted(BASE_URLS))
def test_the_fake_plays_the_presets_server(name: str) -> None:
    table: dict[str, Any] = tomllib.loads(BLOCKS[name])["providers"][name]
    transcript = load_transcript(TRANSCRIPTS / f"preset_{name}.jsonl")
    fake = transcript.header.provider_fake
    assert fake is not None
    given = flags(transcript)
    env = fake["env"]
    assert env["XDG_CONFIG_HOME"] == "${workspace}/xdg" and env["DEFECT_PROVIDER"] is None
    if name in LOCAL:
        assert "api_key_env" not in table, "a local server needs no key"
        assert "--chat-no-key" in given and "--api-key" not in given
    else:
        assert "--chat-no-key" not in given, "the fake must refuse a missing or wrong key"
        assert env[table["api_key_env"]] == given["--api-key"]
    assert given["--chat-reasoning-field"] == REASONING_FIELDS.get(name, "reasoning_content")
    marked = {
        model
        for model, settings in table.get("model_settings", {}).items()
        if settings.get("reasoning")
    }
    assert names(given["--chat-reasoning-models"]) == marked, (
        "the fake refuses reasoning_effort to a model the block does not mark reasoning"
    )
    assert set(table["models"]) <= names(given["--chat-models"]), "the server lists them"
