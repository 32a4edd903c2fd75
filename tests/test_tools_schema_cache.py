"""The tools' derived input schemas kept between processes (`defect_core/tools/schema_cache.py`):
reused only for the code that derived them, never trusted when anything they depend on moved."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, create_model

from defect_core.session.toolset import default_tools
from defect_core.tools.base import input_schema
from defect_core.tools.files.read import ReadArgs
from defect_core.tools.schema_cache import FILENAME, SchemaCache, model_key
from tests.support.acp_harness import script_env, spawn_defect


def cache_in(directory: Path) -> SchemaCache:
    """A cache as a new process starts with it."""
    cache = SchemaCache()
    cache.use(directory)
    return cache


def args_model(description: str = "a path", *, bound: int = 1, nested: Any = None) -> Any:
    """The same model name each call (as a new process would define it), fields as given."""
    fields: dict[str, Any] = {
        "path": (str, Field(description=description)),
        "limit": (int | None, Field(default=None, ge=bound)),
    }
    if nested is not None:
        fields["items"] = (list[nested], Field(default_factory=list))
    model = create_model("Args", __base__=BaseModel, **fields)
    model.__qualname__ = "Args"
    return model


def test_a_new_process_reads_what_an_earlier_one_derived(tmp_path: Path) -> None:
    first = cache_in(tmp_path)
    assert first.get(ReadArgs) is None
    planted = {"type": "object", "description": "as the earlier process left it"}
    first.put(ReadArgs, planted)
    assert not (tmp_path / FILENAME).exists()  # written by flush, once, not per schema
    first.flush()
    assert cache_in(tmp_path).get(ReadArgs) == planted


def test_without_a_directory_nothing_is_kept(tmp_path: Path) -> None:
    cache = SchemaCache()
    cache.put(ReadArgs, {"type": "object"})
    cache.flush()
    assert cache.get(ReadArgs) is None
    assert list(tmp_path.iterdir()) == []


def test_the_key_moves_with_everything_the_schema_depends_on() -> None:
    base = model_key(args_model())
    assert model_key(args_model()) == base  # the same code, another "process": the same key
    assert model_key(args_model("another description")) != base
    assert model_key(args_model(bound=2)) != base

    class Inner(BaseModel):
        name: str = Field(description="one")

    with_inner = model_key(args_model(nested=Inner))

    class Changed(BaseModel):
        name: int = Field(description="one")

    Changed.__name__ = Changed.__qualname__ = Inner.__qualname__
    assert model_key(args_model(nested=Changed)) != with_inner

    colour = enum.Enum("Colour", {"RED": "red"})
    more = enum.Enum("Colour", {"RED": "red", "BLUE": "blue"})
    assert model_key(args_model(nested=colour)) != model_key(args_model(nested=more))


def test_a_cached_schema_for_other_code_is_derived_again_and_replaced(tmp_path: Path) -> None:
    old = cache_in(tmp_path)
    old.put(args_model("old wording"), {"stale": True})
    old.flush()
    current = args_model("new wording")
    fresh = cache_in(tmp_path)
    assert fresh.get(current) is None
    fresh.put(current, {"fresh": True})
    fresh.flush()
    assert cache_in(tmp_path).get(current) == {"fresh": True}


@pytest.mark.parametrize("content", ["{not json", '{"format": 99, "schemas": {}}', "[]"])
def test_a_damaged_or_foreign_file_is_ignored_and_replaced(tmp_path: Path, content: str) -> None:
    (tmp_path / FILENAME).write_text(content)
    cache = cache_in(tmp_path)
    assert cache.get(ReadArgs) is None
    cache.put(ReadArgs, {"type": "object"})
    cache.flush()
    assert json.loads((tmp_path / FILENAME).read_text())["format"] == 1
    assert cache_in(tmp_path).get(ReadArgs) == {"type": "object"}


@pytest.mark.anyio
async def test_agents_sharing_a_state_directory_offer_the_same_tools(tmp_path: Path) -> None:
    """The first real agent derives the schemas and leaves them beside the sessions; the next
    one reads them back: its first turn is sized the same (the offline model counts the tool
    definitions in the usage it reports)."""
    env = script_env(tmp_path)
    usages = []
    for _ in range(2):
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            await agent.prompt(sid, "hello")
            answer = next(
                m["result"]
                for m in agent.wire.from_agent()
                if isinstance(m.get("result"), dict) and "stopReason" in m["result"]
            )
            usages.append(answer["_meta"]["usage"]["inputTokens"])
    assert usages[0] == usages[1] > 0
    kept = json.loads((tmp_path / "state" / FILENAME).read_text())["schemas"]
    read_args = f"{ReadArgs.__module__}.{ReadArgs.__qualname__}"
    assert kept[read_args]["schema"] == input_schema(ReadArgs)
    built_in = {f"{t.args_model.__module__}.{t.args_model.__qualname__}" for t in default_tools()}
    assert built_in <= set(kept)
