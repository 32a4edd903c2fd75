"""No module but the SDK's quarantine reads a private name of the `anthropic` SDK.

docs/architecture.md, "Private internals": a dependency's private names are read in one
module per dependency, behind the switch that turns them off
(`defect_core/providers/anthropic/lazy_sdk.py` for `anthropic`). This walks the syntax tree
of every module of defect's packages and fails on a reach anywhere else: an import of a
private module (`import anthropic._x`, `from anthropic._x import y`, `from anthropic import
_x`), a private module named as a string (`importlib.import_module("anthropic._x")`), or an
attribute read of a name the quarantine lists and the SDK does not export
(`lazy_sdk.PRIVATE_ATTRIBUTES`: `stream._decoder`, `getattr(stream, "_observer")`,
`models.construct_type`...) on anything but `self`/`cls`.
A name the quarantine does not list yet (a new reach) is caught by the first two checks when
it goes through a private module; the list itself is checked against the installed SDK
(tests/test_lazy_sdk.py).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from defect_core.providers.anthropic import lazy_sdk

REPO = Path(__file__).resolve().parent.parent
PACKAGES = sorted(p for p in REPO.glob("defect_*") if (p / "__init__.py").is_file())
QUARANTINE = REPO / "defect_core" / "providers" / "anthropic" / "lazy_sdk.py"
_PRIVATE_MODULE = re.compile(r"anthropic(\.[A-Za-z_]\w*)*\._\w*(\.\w+)*")


def _public_names() -> frozenset[str]:
    """The names the SDK exports publicly (its top package's literal `__all__`, read without
    importing it): `anthropic.AsyncStream` is public, though `anthropic._streaming` is not."""
    spec = importlib.util.find_spec("anthropic")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    raise AssertionError("the SDK's __init__ has no literal __all__")


RETIRED = frozenset(
    {
        "make_request_options",
        "construct_type",
        "SSEDecoder",
        "_decoder",
        "_observer",
        "_client",
        "_make_status_error",
        "messages_create_request_attributes",
    }
)
"""Private names the streamed call once read (through the quarantine) and reads no more: the
call is public now (defect_core/providers/anthropic/call.py), and a read of one anywhere but
the quarantine is still a reach."""
_NAMES = (
    frozenset(
        name
        for _, name in lazy_sdk.PRIVATE_ATTRIBUTES
        if not (name.startswith("__") and name.endswith("__"))
    )
    | RETIRED
) - _public_names()
"""The names listed (and retired) that are read only privately: an attribute read of one,
or the string of one, outside the quarantine is a reach."""


def private_reads(source: str, filename: str = "<source>") -> list[str]:
    """Each reach into the SDK's private names in `source`, as `line: what`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        what = _reach(node)
        if what is not None:
            found.append((getattr(node, "lineno", 0), what))
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def _reach(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if _PRIVATE_MODULE.fullmatch(alias.name):
                return f"import {alias.name}"
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if _PRIVATE_MODULE.fullmatch(node.module):
            return f"from {node.module} import"
        if node.module.split(".")[0] == "anthropic":
            for alias in node.names:
                if alias.name.startswith("_") or alias.name in _NAMES:
                    return f"from {node.module} import {alias.name}"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _PRIVATE_MODULE.fullmatch(node.value) or node.value in _NAMES:
            return repr(node.value)
    elif isinstance(node, ast.Attribute) and node.attr in _NAMES:
        owner = node.value
        if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            return f".{node.attr}"
    return None


def test_no_module_but_the_quarantine_reads_a_private_name_of_the_sdk() -> None:
    modules = [p for package in PACKAGES for p in sorted(package.rglob("*.py"))]
    assert QUARANTINE in modules and len(modules) > 100
    found = [
        hit
        for path in modules
        if path != QUARANTINE
        for hit in private_reads(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert found == [], "\n".join(found)


def test_the_names_checked_are_the_private_ones() -> None:
    assert {"_decoder", "_observer", "_client", "construct_type", "SSEDecoder"} <= _NAMES
    assert "AsyncStream" not in _NAMES  # `anthropic.AsyncStream` is public


def test_the_quarantine_itself_reads_them() -> None:
    # The check sees the reaches where they are: it would see them anywhere else.
    found = private_reads(QUARANTINE.read_text(encoding="utf-8"))
    assert any("'anthropic._utils._logs'" in hit for hit in found)
    assert any(hit.endswith(": .setup_logging") for hit in found)
    assert any(hit.endswith(": 'make_status_error'") for hit in found)


def test_the_call_reads_no_private_name_at_all() -> None:
    # Not even through the quarantine: the streamed call and its events use the SDK's public
    # API only, whatever the switch says (docs/architecture.md, "Private internals").
    anthropic_dir = QUARANTINE.parent
    for name in ("call.py", "stream_events.py", "sse.py", "client.py", "provider.py"):
        source = (anthropic_dir / name).read_text(encoding="utf-8")
        assert private_reads(source, name) == []
        tree = ast.parse(source)
        used = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "lazy_sdk"
        }
        assert used <= {"install", "enabled"}, (name, used)  # the import's switch, no reach


def test_each_kind_of_reach_is_found() -> None:
    source = (
        "import importlib\n"
        "import anthropic._streaming\n"
        "from anthropic._models import construct_type\n"
        "from anthropic.lib import _tracing\n"
        "from anthropic import AsyncAnthropic\n"  # public: not a reach
        "base = importlib.import_module('anthropic._base_client')\n"
        "decoder = getattr(stream, '_decoder', None)\n"
        "client = stream._client\n"
        "error = client._make_status_error('x', body=None, response=None)\n"
        "self._client = None\n"  # one's own attribute of that name: not a reach
        "types = importlib.import_module('anthropic.types.message')\n"  # public
    )
    found = [hit.split(": ", 1)[1] for hit in private_reads(source)]
    assert found == [
        "import anthropic._streaming",
        "from anthropic._models import",
        "from anthropic.lib import _tracing",
        "'anthropic._base_client'",
        "'_decoder'",
        "._client",
        "._make_status_error",
    ]
