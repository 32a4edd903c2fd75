"""Start-up speed: import the ACP SDK in about half the time.

Owns `prepare_pydantic()`, which runs before the first `import acp`.

Why: an editor waits on `initialize` and `session/new`, and `import acp` is most of that
wait (~0.6 s here): `acp.schema` defines ~270 pydantic models whose base config asks
pydantic to read every field's docstring from the source file (`use_attribute_docstrings`;
below Python 3.13 that re-parses each class with `ast`), and pydantic builds every
validator eagerly. Field docstrings only feed JSON-schema descriptions, which defect never
generates, and validators can be built on first use (`defer_build`), which spreads a few
milliseconds over the first requests instead of paying for all 270 models up front.

Invariant: both changes are optional optimisations. If pydantic's internals move (a newer
release), `prepare_pydantic` changes nothing and says so in its return value; a test pins
that it still applies to the pydantic this project installs, and the integration tests
prove the SDK's models still validate and serialise the same way.
"""

from __future__ import annotations


def prepare_pydantic() -> list[str]:
    """Apply the start-up optimisations; returns the names of those that applied."""
    applied: list[str] = []
    try:
        from pydantic._internal import _config, _fields
    except ImportError:
        return applied
    if callable(getattr(_fields, "extract_docstrings_from_cls", None)):

        def _no_docstrings(cls: type, use_inspect: bool = False) -> dict[str, str]:
            return {}

        _fields.extract_docstrings_from_cls = _no_docstrings
        applied.append("skip_attribute_docstrings")
    defaults = getattr(_config, "config_defaults", None)
    if isinstance(defaults, dict) and "defer_build" in defaults:
        defaults["defer_build"] = True
        applied.append("defer_build")
    return applied
