"""The SDK's packages load lazily and give the very objects the eager import binds.

`defect_core/providers/anthropic/lazy_sdk.py` loads `anthropic` (and its re-export packages)
without running their `__init__`; a name resolves on first use. Each check runs in a fresh
interpreter (the test process may already hold the SDK, imported eagerly), against the SDK
this project installs, so an SDK release that breaks the assumptions fails here first: the
installed version must be one the module knows, and the switch (`lazy_sdk.enabled`) must
leave the import eager for any other version, or when `DEFECT_PRIVATE_PATHS=off`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from defect_core.providers.anthropic import lazy_sdk


def _run(code: str, env: dict[str, str] | None = None) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_installed_sdk_loads_lazily_and_only_in_part() -> None:
    result = _run(
        """
        import json, sys
        from defect_core.providers.anthropic import client, lazy_sdk
        sdk = client.import_sdk()
        for name in client.SDK_NAMES:
            getattr(sdk.anthropic, name)
        import anthropic.resources.messages.messages, anthropic.types.raw_message_stream_event
        lazy = [lazy_sdk.lazily_loaded(sys.modules[m]) for m in ("anthropic", "anthropic.types")]
        count = sum(1 for m in sys.modules if m == "anthropic" or m.startswith("anthropic."))
        print(json.dumps({"lazy": lazy, "count": count}))
        """
    )
    eager = _run(
        """
        import json, sys, anthropic
        print(json.dumps(sum(1 for m in sys.modules if m.startswith("anthropic"))))
        """
    )
    assert result["lazy"] == [True, True]
    assert result["count"] < eager / 2, (result, eager)


def test_every_name_resolves_to_what_the_eager_init_binds() -> None:
    # Resolve every public name lazily, then run the real __init__ (what a name nobody
    # mapped does) and compare: the same object each time, in the top package and in types.
    result = _run(
        """
        import json, sys
        from defect_core.providers.anthropic import lazy_sdk
        lazy_sdk.install()
        import anthropic, anthropic.types
        differ, count = [], 0
        stars = {anthropic: ["AsyncAnthropicBedrock", "AsyncMessageStream"], anthropic.types: []}
        for module, star_names in stars.items():
            names = list(module.__loader__._names) + star_names
            values = {n: getattr(module, n) for n in names}
            try:
                getattr(module, "no_such_name_anywhere")
            except AttributeError:
                pass
            assert not lazy_sdk.lazily_loaded(module)  # the real __init__ ran
            for name, value in values.items():
                count += 1
                if module.__dict__[name] is not value:
                    differ.append(f"{module.__name__}.{name}")
        print(json.dumps({"differ": differ, "count": count}))
        """
    )
    assert result["differ"] == []
    assert result["count"] > 500


def test_from_imports_of_submodules_and_star_exports_work() -> None:
    result = _run(
        """
        import json
        from defect_core.providers.anthropic import lazy_sdk
        lazy_sdk.install()
        from anthropic import _exceptions, AsyncAnthropicBedrock, types
        from anthropic.types import Message, RawMessageStreamEvent
        print(json.dumps([
            _exceptions.__name__, AsyncAnthropicBedrock.__name__, types.__name__,
            Message.__module__, lazy_sdk.lazily_loaded(types),
        ]))
        """
    )
    assert result == [
        "anthropic._exceptions",
        "AsyncAnthropicBedrock",
        "anthropic.types",
        "anthropic.types.message",
        True,
    ]


def test_the_first_request_path_leaves_the_tracing_and_messages_modules_unloaded() -> None:
    # What the preload imports (client.SDK_PATH and the names the provider reads) must not
    # reach the SDK's OpenTelemetry helpers nor its messages resource: those import the beta
    # API's types, most of the first prompt's wait (lazy_sdk.DEFERRED_CALLS, call.py).
    result = _run(
        """
        import importlib, json, sys
        from defect_core.providers.anthropic import client
        sdk = client.import_sdk()
        for module in client.SDK_PATH:
            importlib.import_module(module)
        for name in client.SDK_NAMES:
            getattr(sdk.anthropic, name)
        import anthropic._base_client as base
        unloaded = [m for m in ("anthropic.lib._tracing._api_call",
                                "anthropic.resources.messages.messages",
                                "anthropic.types.beta.message_create_params",
                                "anthropic.types.beta")
                    if m not in sys.modules]
        print(json.dumps([unloaded, base.finish_api_call_span.__module__]))
        """
    )
    unloaded, forwarder_module = result
    assert unloaded == [
        "anthropic.lib._tracing._api_call",
        "anthropic.resources.messages.messages",
        "anthropic.types.beta.message_create_params",
        "anthropic.types.beta",
    ]
    assert forwarder_module == "anthropic.lib._tracing._api_call"


def test_a_deferred_call_forwards_to_the_real_function_then_gives_it() -> None:
    result = _run(
        """
        import inspect, json, sys
        from defect_core.providers.anthropic import lazy_sdk
        lazy_sdk.install()
        import anthropic.lib._tracing as tracing
        names = sorted(lazy_sdk.DEFERRED_CALLS["anthropic.lib._tracing"])
        forwarders = {n: getattr(tracing, n) for n in names}
        loaded_before = "anthropic.lib._tracing._api_call" in sys.modules
        body = {"model": "m", "output_config": {"format": {"type": "json_schema"}}}
        forwarded = forwarders["messages_create_request_attributes"](body)
        import anthropic.lib._tracing._api_call as real
        print(json.dumps({
            "loaded_before": loaded_before,
            "functions": all(inspect.isfunction(getattr(real, n)) for n in names),
            "same_result": forwarded == real.messages_create_request_attributes(body),
            "forwarded": forwarded,
            "real_after": all(getattr(tracing, n) is getattr(real, n) for n in names),
            "not_kept": all(getattr(tracing, n) is not forwarders[n] for n in names),
        }))
        """
    )
    assert result == {
        "loaded_before": False,
        "functions": True,
        "same_result": True,
        "forwarded": {"gen_ai.output.type": "json"},
        "real_after": True,
        "not_kept": True,
    }


def test_the_error_classes_run_on_the_first_error_and_give_the_eager_classes() -> None:
    # `anthropic._error_classes` (DEFERRED_MODULES) is created without running: the client's
    # `make_status_error` runs it on the first error answer, and picks the class the eager
    # module picks, for a typed error code, a status alone, and an unknown status.
    code = """
        import json, sys
        {install}
        import anthropic._base_client as base
        import httpx2
        ran_before = "anthropic.types.beta" in sys.modules
        cases = [(429, "rate_limit_error"), (400, "invalid_request_error"), (529, None),
                 (404, "not_found_error"), (418, None)]
        picked = []
        for status, kind in cases:
            response = httpx2.Response(status, request=httpx2.Request("POST", "http://h/v1"))
            body = {{"type": "error", "error": {{"type": kind, "message": "m"}}}}
            error = base.make_status_error("m", body=body, response=response)
            picked.append([type(error).__qualname__, error.status_code])
        from anthropic._error_classes import ERROR_CLASSES
        print(json.dumps([ran_before, picked, len(ERROR_CLASSES)]))
        """
    lazy = _run(
        code.format(
            install="from defect_core.providers.anthropic import lazy_sdk; lazy_sdk.install()"
        )
    )
    eager = _run(code.format(install="import anthropic"))
    assert lazy[0] is False and eager[0] is True
    assert lazy[1:] == eager[1:]
    # (`__module__` is not compared: the eager `__init__` renames it, lazy_sdk's docstring)
    assert {name for name, _ in lazy[1]} >= {"RateLimitError", "BadRequestError"}


def test_the_installed_sdk_is_a_version_the_lazy_path_knows() -> None:
    # A new SDK release installed here fails this first: check the tests above pass against
    # it, then add its (major, minor) to `KNOWN_VERSIONS`.
    installed = importlib.metadata.version("anthropic")
    major, minor = (int(part) for part in installed.split(".")[:2])
    assert lazy_sdk.sdk_version() == (major, minor)
    assert (major, minor) in lazy_sdk.KNOWN_VERSIONS, installed
    assert lazy_sdk.enabled({})


def test_each_private_name_the_quarantine_lists_is_in_the_installed_sdk() -> None:
    # lazy_sdk.py reads these and no other module does (tests/test_sdk_quarantine.py): an
    # SDK release that renames or drops one fails here, naming it.
    missing = [m for m in lazy_sdk.PRIVATE_MODULES if importlib.util.find_spec(m) is None]
    assert missing == []
    for owner, name in lazy_sdk.PRIVATE_ATTRIBUTES:
        module, _, attribute = owner.rpartition(".")
        try:
            found: Any = importlib.import_module(owner)
        except ImportError:  # a class: `module.Class`
            found = getattr(importlib.import_module(module), attribute)
        if hasattr(found, name):
            continue
        # An attribute the class's module gives each instance (`self._decoder = ...`).
        assert isinstance(found, type), f"{owner}.{name}"
        source = Path(str(sys.modules[module].__file__)).read_text(encoding="utf-8")
        assert re.search(rf"self\.{re.escape(name)}\s*=", source), f"{owner}.{name}"


_EAGER_CHECK = """
    import json, sys
    from defect_core.providers.anthropic import client, lazy_sdk
    sdk = client.import_sdk()
    print(json.dumps({
        "enabled": lazy_sdk.enabled(),
        "version": lazy_sdk.sdk_version(),
        "lazy": lazy_sdk.lazily_loaded(sdk.anthropic),
        "finder": any(isinstance(f, lazy_sdk.LazyPackageFinder) for f in sys.meta_path),
        "client": sdk.anthropic.AsyncAnthropic.__name__,
    }))
    """


def test_the_switch_set_off_keeps_the_sdk_import_eager() -> None:
    env = {**os.environ, lazy_sdk.SWITCH: "off"}
    result = _run(_EAGER_CHECK, env)
    assert result["enabled"] is False
    assert result["lazy"] is False and result["finder"] is False
    assert result["client"] == "AsyncAnthropic"  # the documented import, whole
    on = _run(_EAGER_CHECK, {k: v for k, v in os.environ.items() if k != lazy_sdk.SWITCH})
    assert on["enabled"] is True and on["lazy"] is True and on["finder"] is True


def test_an_sdk_version_the_module_does_not_know_keeps_the_import_eager(tmp_path: Path) -> None:
    # The real SDK, seen through a package directory that says another version: the same
    # files but `_version.py`, first on the path.
    spec = importlib.util.find_spec("anthropic")
    assert spec is not None and spec.origin is not None
    real = Path(spec.origin).parent
    shadow = tmp_path / "anthropic"
    shadow.mkdir()
    for entry in real.iterdir():
        if entry.name != "_version.py":
            (shadow / entry.name).symlink_to(entry)
    (shadow / "_version.py").write_text(
        '__title__ = "anthropic"\n__version__ = "9.1.0"\n', encoding="utf-8"
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    result = _run(_EAGER_CHECK, {**os.environ, "PYTHONPATH": path})
    assert result["version"] == [9, 1]
    assert result["enabled"] is False
    assert result["lazy"] is False and result["finder"] is False
    assert result["client"] == "AsyncAnthropic"
