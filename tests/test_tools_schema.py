"""What a built-in tool's input schema promises is what its argument validation does.

Every built-in tool is checked (a new tool is covered by its row in `session/toolset.py`):
its schema is the one derived from the model its `run` validates with; it is valid JSON
Schema (draft 2020-12, checked with `jsonschema`) with nothing the Anthropic API rejects; and
for every property, probes of every JSON type and the edges of every bound are judged by
both the schema (`jsonschema`) and the model (pydantic). They must agree, except where the
model accepts another spelling of a value the schema accepts ("5" for 5, `null` for an
absent optional field) — that leniency costs the model nothing and changes no meaning.
Required fields, defaults and the extra-keys policy (refused by both) are checked too, and
the refusals again through the tools' own `run`.
"""

from __future__ import annotations

import enum
import json
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, ValidationError

from defect_core.session.toolset import default_tools
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import Tool, ToolContext, ToolError, ToolRegistry, input_schema
from defect_core.tools.workspace import ToolArgs
from tests.support.tool_facts import every_builtin_tool

REGISTRY = ToolRegistry(default_tools())

TOOLS = every_builtin_tool()
"""Every row of the table of built-in tools (`session/toolset.py`), each made under facts
where its condition holds."""

PROPERTY_KEY = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
"""The API refuses a property name outside this pattern (`input_schema.properties`)."""
NOISE = frozenset({"title", "$ref", "$defs", "$schema", "$id", "definitions"})
"""Keys a self-contained, compact schema does not need (and a provider may refuse)."""
SCALARS = (bool, int, float, str)
UNKNOWN = object()


def args_model(tool: Tool) -> type[BaseModel]:
    model = getattr(tool, "args_model", None)
    assert isinstance(model, type) and issubclass(model, ToolArgs), (
        f"{tool.name}: a built-in tool validates with a ToolArgs model exposed as `args_model`"
    )
    return model


def sample(prop: dict[str, Any]) -> Any:
    """A value the property's schema accepts."""
    if "enum" in prop:
        return prop["enum"][0]
    if "const" in prop:
        return prop["const"]
    kind = prop.get("type")
    if kind == "string":
        return "a" * max(prop.get("minLength", 1), 1)
    if kind in ("integer", "number"):
        if "minimum" in prop:
            return prop["minimum"]
        if "exclusiveMinimum" in prop:
            return prop["exclusiveMinimum"] + 1
        return prop.get("maximum", 1)
    if kind == "boolean":
        return False
    if kind == "array":  # as many items as it needs (`ask_user`'s options)
        return [sample(prop["items"]) for _ in range(prop.get("minItems", 0))]
    if kind == "object":
        return minimal(prop) if "properties" in prop else {}
    raise AssertionError(f"no sample for {prop}")


def minimal(schema: dict[str, Any]) -> dict[str, Any]:
    return {name: sample(schema["properties"][name]) for name in schema.get("required", [])}


def probes(prop: dict[str, Any]) -> list[Any]:
    values: list[Any] = [None, True, False, 0, 1, -1, 5, 2.5, "", "a", "5", "true"]
    values += [[], ["a"], {}, {"a": 1}]
    for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if bound in prop:
            edge = prop[bound]
            values += [edge, edge - 1, edge + 1, edge - 0.5, edge + 0.5, str(edge)]
    if "minLength" in prop:
        values += ["x" * prop["minLength"], "x" * max(prop["minLength"] - 1, 0)]
    if "enum" in prop:
        values += [*prop["enum"], "not-a-member"]
    return values


def judge(model: type[BaseModel], args: dict[str, Any]) -> BaseModel | None:
    try:
        return model.model_validate(args)
    except ValidationError:
        return None


def assert_agreement(model: type[BaseModel], schema: dict[str, Any]) -> int:
    """Every probe of every property is judged alike (or leniently respelled); returns how
    many probes the schema and the model both refused, so a caller can see the check bite."""
    validator = Draft202012Validator(schema)
    base = minimal(schema)
    assert validator.is_valid(base) and judge(model, base) is not None, base
    fields = model.model_fields
    assert list(schema["properties"]) == list(fields), "properties are the model's fields"
    refused_alike = 0
    for name, prop in schema["properties"].items():
        for value in probes(prop):
            args = {**base, name: value}
            promised = validator.is_valid(args)
            got = judge(model, args)
            seen = UNKNOWN if got is None else getattr(got, name)
            where = f"{model.__name__}.{name} = {value!r}"
            if promised:
                assert got is not None, f"{where}: the schema accepts it, validation refuses it"
                assert seen == value, f"{where}: validation made it {seen!r}"
                assert isinstance(seen, bool) == isinstance(value, bool), where
                continue
            if got is None:
                refused_alike += 1
                continue
            # Accepted though the schema refuses it: only as a respelling of an accepted value.
            if value is None:
                assert name not in schema.get("required", []), f"{where}: null for a required"
                assert seen == fields[name].default, f"{where}: null must mean absent"
            else:
                assert isinstance(value, SCALARS), f"{where}: validation accepts a non-scalar"
                assert validator.is_valid({**base, name: seen}), (
                    f"{where}: validation made it {seen!r}, which the schema refuses"
                )
    return refused_alike


def assert_required_defaults_and_extras(model: type[BaseModel], schema: dict[str, Any]) -> None:
    validator = Draft202012Validator(schema)
    base = minimal(schema)
    for name in schema.get("required", []):
        missing = {k: v for k, v in base.items() if k != name}
        assert not validator.is_valid(missing)
        with pytest.raises(ValidationError) as err:
            model.model_validate(missing)
        assert [(e["loc"], e["type"]) for e in err.value.errors()] == [((name,), "missing")]
    parsed = model.model_validate(base)
    for name, prop in schema["properties"].items():
        if name in schema.get("required", []):
            continue
        # A documented default is the one validation fills in; no default shown means none.
        assert getattr(parsed, name) == prop.get("default"), f"{model.__name__}.{name}"
        if "default" in prop:
            assert Draft202012Validator(prop).is_valid(prop["default"]), f"{model.__name__}.{name}"

    assert schema.get("additionalProperties") is False
    extra = {**base, "unexpected_key": 1}
    assert not validator.is_valid(extra)
    with pytest.raises(ValidationError) as err:
        model.model_validate(extra)
    assert [(e["loc"], e["type"]) for e in err.value.errors()] == [
        (("unexpected_key",), "extra_forbidden")
    ]


def assert_provider_ready(schema: dict[str, Any]) -> None:
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert not {"oneOf", "anyOf", "allOf", "not", "enum", "const"} & schema.keys(), (
        "the API refuses a union (or anything but a plain object) at the top level"
    )

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            assert not NOISE & node.keys(), f"{sorted(NOISE & node.keys())} in {node}"
            # Every byte is sent with every request: an optional field is its plain type, not
            # `anyOf: [type, null]` with `default: null` (validation still takes null).
            assert node.get("default", ...) is not None, f"default null in {node}"
            assert {"type": "null"} not in node.get("anyOf", []), f"null branch in {node}"
            for key, value in node.items():
                if key == "properties":
                    assert all(PROPERTY_KEY.match(k) for k in value), list(value)
                    for sub in value.values():
                        walk(sub)
                elif key not in ("default", "enum", "const", "examples"):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- every registered built-in tool -----------------------------------------------------------


def test_the_registry_holds_every_built_in_tool() -> None:
    names = [t.name for t in default_tools()]
    assert len(set(names)) == len(names) == len(REGISTRY)
    assert {"read_file", "write_file", "edit_file", "bash", "search"} <= set(names)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_the_schema_is_derived_from_the_model_run_validates_with(tool: Tool) -> None:
    model = args_model(tool)
    assert tool.input_schema == input_schema(model)
    assert tool.input_schema is input_schema(model), "cached: the same dict every turn"
    described = {n for n, p in tool.input_schema["properties"].items() if "description" in p}
    assert described == {n for n, f in model.model_fields.items() if f.description}


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_the_schema_is_valid_and_provider_ready(tool: Tool) -> None:
    assert_provider_ready(tool.input_schema)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_schema_and_validation_agree_on_every_probe(tool: Tool) -> None:
    assert assert_agreement(args_model(tool), tool.input_schema) > 0


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_required_fields_defaults_and_extra_keys_agree(tool: Tool) -> None:
    assert_required_defaults_and_extras(args_model(tool), tool.input_schema)


@pytest.mark.anyio
@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
async def test_run_refuses_what_the_schema_refuses(tool: Tool, tmp_path: Path) -> None:
    ctx = ToolContext("s", tmp_path, LocalFsBackend(), LocalShellBackend())
    base = minimal(tool.input_schema)
    with pytest.raises(ToolError) as err:
        await tool.run({**base, "cwd": "elsewhere"}, ctx)
    fields = ", ".join(args_model(tool).model_fields)
    assert str(err.value) == (
        f"invalid arguments for {tool.name}: cwd: unknown argument; the arguments are {fields}"
    )
    for name in tool.input_schema.get("required", []):
        with pytest.raises(ToolError, match=rf"^invalid arguments for {tool.name}: {name}: "):
            await tool.run({k: v for k, v in base.items() if k != name}, ctx)
    assert list(tmp_path.iterdir()) == [], "nothing ran, nothing was written"


def test_the_tool_list_is_byte_stable() -> None:
    # The tool list is part of the cached prompt prefix: fresh instances, the same bytes.
    def wire(registry: ToolRegistry) -> str:
        return json.dumps([(s.name, s.description, s.input_schema) for s in registry.specs()])

    assert wire(REGISTRY) == wire(ToolRegistry(default_tools()))


# --- the helper on shapes the built-in tools do not use (yet) ---------------------------------


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Span(BaseModel):
    """Lines of a file."""

    start: int = Field(ge=1, description="First line.")
    end: int | None = None


class Shapes(ToolArgs):
    """Not shown: the tool has its own description."""

    mode: Literal["fast", "slow"] = Field(default="fast", description="How.")
    colour: Colour | None = None
    span: Span | None = None
    title: str = Field(description="A property may be called title.")
    tags: list[str] | None = None


class Node(ToolArgs):
    child: Node | None = None


def test_the_helper_inlines_definitions_and_drops_noise() -> None:
    schema = input_schema(Shapes)
    assert schema == {
        "type": "object",
        "properties": {
            "mode": {
                "type": "string",
                "description": "How.",
                "enum": ["fast", "slow"],
                "default": "fast",
            },
            "colour": {"type": "string", "enum": ["red", "blue"]},
            "span": {
                "type": "object",
                "description": "Lines of a file.",
                "properties": {
                    "start": {"type": "integer", "description": "First line.", "minimum": 1},
                    "end": {"type": "integer"},
                },
                "required": ["start"],
            },
            "title": {"type": "string", "description": "A property may be called title."},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["title"],
        "additionalProperties": False,
    }
    assert_provider_ready(schema)
    assert assert_agreement(Shapes, schema) > 0
    assert_required_defaults_and_extras(Shapes, schema)
    # The enum probes bite: a member is taken, a stranger refused by both.
    assert judge(Shapes, {"title": "t", "mode": "slow"}) is not None
    assert judge(Shapes, {"title": "t", "mode": "medium"}) is None
    assert not Draft202012Validator(schema).is_valid({"title": "t", "mode": "medium"})


def test_the_helper_refuses_a_recursive_model() -> None:
    with pytest.raises(ValueError, match="cannot inline"):
        input_schema(Node)
