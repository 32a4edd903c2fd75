"""The ACP registry's checks of an agent, run here: the manifest, the icon, `initialize`.

Owns what the registry (`agentclientprotocol/registry`) verifies before it lists an agent, so
a release is known to pass before it is submitted:

- `manifest_problems`: `agent.json` validates against the registry's entry schema (vendored
  in `tests/schema/registry/`, see its README), and every package distribution pins exactly
  the entry's version (`defect==X.Y.Z`, as the registry's build script demands);
- `icon_problems`: the icon is a square 16×16 SVG drawn in `currentColor` only (no hard-coded
  fill or stroke), so an editor can theme it;
- `initialize` + `auth_problems`: the installed agent, spawned with the manifest's arguments
  in a sandboxed `HOME`, answers `initialize` (the registry's own request, raw JSON-RPC) with
  a result valid against the vendored ACP schema (`tests/schema/schema.v1.json`) whose
  `authMethods` offer at least one Agent or Terminal method; a method's type is read as the
  registry reads it (`type`, else a `terminal-auth` / `agent-auth` key of `_meta`, else
  agent). A Terminal method must also run: the editor starts the agent's program with the
  method's `args` (and `env`), so `<program> <args> --help` must exit 0.

Invariants: every child is bounded by a timeout and ended when the check ends; the user's
configuration and sessions are never read (`HOME` is a temporary directory and the
`DEFECT_*` and `XDG_*` variables are dropped); a problem is one line saying what is wrong.

Usage: `python scripts/registry_check.py --program PATH/bin/defect` (an installed agent) or
`--wheel dist/defect-X.Y.Z-py3-none-any.whl` (installed first into a temporary venv, its
dependencies from the configured index); `make release-check` runs it on a fresh build.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_SCHEMA = ROOT / "tests" / "schema" / "registry" / "agent.schema.json"
ACP_SCHEMA = ROOT / "tests" / "schema" / "schema.v1.json"
ICON_SIZE = 16
PLAIN_PAINTS = frozenset({"currentcolor", "none", "inherit"})
AUTH_TYPES = frozenset({"agent", "terminal"})
"""The auth method types the registry accepts (AUTHENTICATION.md of the registry)."""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": 1,
        "clientInfo": {"name": "defect registry check", "version": "1.0.0"},
        "clientCapabilities": {
            "terminal": True,
            "fs": {"readTextFile": True, "writeTextFile": True},
            "_meta": {"terminal_output": True, "terminal-auth": True},
        },
    },
}
"""What the registry's CI sends (its `.github/workflows/client.py`)."""


class CheckError(Exception):
    """The check itself could not run: a schema that does not load, an agent that won't start."""


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckError(f"{path.name}: cannot be read as JSON: {exc}") from exc


def manifest_problems(manifest: Any, schema: dict[str, Any]) -> list[str]:
    """What the registry would refuse in `agent.json` (a bad schema raises `CheckError`)."""
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise CheckError(f"the registry schema is not a valid JSON Schema: {exc.message}") from exc
    validator = validator_class(schema)
    problems = [
        f"agent.json: {'.'.join(map(str, error.absolute_path)) or 'root'}: {error.message}"
        for error in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
    ]
    if problems or not isinstance(manifest, dict):
        return problems
    version = manifest["version"]
    pins = {"uvx": r"==([^,;\s]+)$", "npx": r"(?<=.)@([^@/\s]+)$"}  # defect==1.2.3, x@1.2.3
    for kind, pin in pins.items():
        package = manifest["distribution"].get(kind, {}).get("package", "")
        pinned = re.search(pin, package)
        if pinned is None:
            if kind in manifest["distribution"]:
                problems.append(f"agent.json: {kind} package {package!r} pins no exact version")
        elif pinned.group(1) != version:
            problems.append(
                f"agent.json: {kind} package pins {pinned.group(1)}, the entry says {version}"
            )
    return problems


def icon_problems(svg: str) -> list[str]:
    """The registry's rules for an icon: square, 16×16, monochrome in `currentColor`."""
    problems = []
    width = re.search(r"<svg[^>]*\swidth=[\"'](\d+)", svg)
    height = re.search(r"<svg[^>]*\sheight=[\"'](\d+)", svg)
    box = re.search(r"viewBox=[\"'][\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)", svg)
    if width and height:
        size = (float(width.group(1)), float(height.group(1)))
    elif box:
        size = (float(box.group(1)), float(box.group(2)))
    else:
        return ["icon.svg: no width/height nor viewBox"]
    if size != (ICON_SIZE, ICON_SIZE):
        problems.append(f"icon.svg: {size[0]:g}x{size[1]:g}, the registry wants 16x16")
    paints = re.findall(r"\b(?:fill|stroke)\s*[=:]\s*[\"']?([^\"';>]+)", svg, re.IGNORECASE)
    for paint in dict.fromkeys(p.strip() for p in paints):
        if paint.lower() not in PLAIN_PAINTS:
            problems.append(f"icon.svg: hard-coded colour {paint!r} (use currentColor)")
    if not re.search("currentColor", svg, re.IGNORECASE):
        problems.append("icon.svg: never uses currentColor, so it cannot follow the theme")
    return problems


def sandbox_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: this one without defect's and XDG's variables, in `home`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DEFECT_", "XDG_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(HOME=str(home), TERM="dumb")
    env.update(extra or {})
    return env


def initialize(
    command: list[str], home: Path, env: dict[str, str] | None = None, timeout: float = 60.0
) -> dict[str, Any]:
    """The result the agent started by `command` (`env` added) answers to `initialize`."""
    try:
        agent = subprocess.Popen(
            command,
            cwd=home,
            env=sandbox_env(home, env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        raise CheckError(f"{command[0]}: cannot be started: {exc}") from exc
    assert agent.stdin is not None and agent.stdout is not None
    try:
        agent.stdin.write(json.dumps(INITIALIZE) + "\n")
        agent.stdin.flush()
        ready, _, _ = select.select([agent.stdout], [], [], timeout)
        line = agent.stdout.readline() if ready else ""
    finally:
        stderr = _end(agent)
    if not line and ready:
        raise CheckError(f"the agent ended (exit {agent.returncode}) unanswered; stderr: {stderr}")
    if not line:
        raise CheckError(f"no answer to initialize within {timeout:g} s; stderr: {stderr}")
    try:
        answer = json.loads(line)
    except ValueError as exc:
        raise CheckError(f"the answer to initialize is not JSON: {line[:200]!r}") from exc
    if "result" not in answer:
        raise CheckError(f"initialize failed: {answer.get('error')}")
    result: dict[str, Any] = answer["result"]
    return result


def _end(agent: subprocess.Popen[str]) -> str:
    """End the agent (end of input first, as an editor closing it) and its process group
    (a launcher such as uvx runs the agent as its child); the tail of its stderr."""
    try:
        _, stderr = agent.communicate(input="", timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        _, stderr = agent.communicate()
    return stderr[-2000:]


def auth_type(method: dict[str, Any]) -> str:
    """A method's type as the registry reads it: `type`, else `_meta`, else agent."""
    if method.get("type"):
        return str(method["type"])
    meta = method.get("_meta")
    if isinstance(meta, dict):
        if "terminal-auth" in meta:
            return "terminal"
        if "agent-auth" in meta:
            return "agent"
    return "agent"


def schema_problems(result: dict[str, Any], acp_schema: dict[str, Any]) -> list[str]:
    """Where `result` breaks the ACP schema's `InitializeResponse`."""
    registry = Registry().with_resource("urn:acp", Resource.from_contents(acp_schema))
    validator = jsonschema.Draft202012Validator(
        {"$ref": "urn:acp#/$defs/InitializeResponse"}, registry=registry
    )
    return [
        f"initialize: {'.'.join(map(str, e.absolute_path)) or 'result'}: {e.message}"
        for e in validator.iter_errors(result)
    ]


def auth_problems(result: dict[str, Any], program: str, home: Path) -> list[str]:
    """The registry's auth rules on an `initialize` result, and each Terminal method run."""
    methods = result.get("authMethods") or []
    usable = [m for m in methods if isinstance(m, dict) and auth_type(m) in AUTH_TYPES]
    if not usable:
        found = [auth_type(m) for m in methods if isinstance(m, dict)]
        return [
            "initialize: authMethods offers no Agent or Terminal method "
            f"(found {found or 'none'}); the registry lists only agents a user can log in to"
        ]
    problems = []
    for method in usable:
        if auth_type(method) != "terminal":
            continue
        args = [str(a) for a in method.get("args") or []]
        command = [program, *args, "--help"]
        env = sandbox_env(home, {str(k): str(v) for k, v in (method.get("env") or {}).items()})
        try:
            done = subprocess.run(
                command, cwd=home, env=env, capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"auth method {method.get('id')!r}: {' '.join(command)}: {exc}")
            continue
        if done.returncode != 0:
            problems.append(
                f"auth method {method.get('id')!r}: `{' '.join([Path(program).name, *args])} "
                f"--help` exits {done.returncode}: {done.stderr.strip()[-300:]}"
            )
    return problems


def check_agent(program: str, args: list[str], home: Path) -> list[str]:
    """Every problem the registry's CI would find with the agent `program args` starts."""
    result = initialize([program, *args], home)
    return schema_problems(result, load_json(ACP_SCHEMA)) + auth_problems(result, program, home)


def check_manifest(root: Path) -> list[str]:
    """Every problem the registry's build would find with `agent.json` and its icon."""
    manifest = load_json(root / "agent.json")
    problems = manifest_problems(manifest, load_json(REGISTRY_SCHEMA))
    icon = root / str(manifest.get("icon", "icon.svg") if isinstance(manifest, dict) else "")
    if icon.is_file() and icon.suffix == ".svg":
        problems += icon_problems(icon.read_text(encoding="utf-8"))
    else:
        problems.append(f"agent.json: icon {icon.name!r} is not an SVG file of the repository")
    return problems


def install_wheel(wheel: Path, into: Path) -> str:
    """Install `wheel` into a fresh venv at `into`; the path of its `defect` command."""
    venv.create(into, with_pip=False)
    python = str(into / "bin" / "python")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise CheckError(f"pip install {wheel.name} failed: {done.stderr.strip()[-500:]}")
    return str(into / "bin" / "defect")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--program", help="the installed `defect` command to check")
    where.add_argument("--wheel", type=Path, help="a built wheel, installed into a temporary venv")
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree holding agent.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="defect-registry-check-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        try:
            problems = check_manifest(args.root)
            uvx = load_json(args.root / "agent.json").get("distribution", {}).get("uvx")
            if not isinstance(uvx, dict):
                problems.append("agent.json: no distribution.uvx, the way defect is listed")
            if not problems:
                agent_args = [str(a) for a in uvx.get("args", [])]
                program = args.program or install_wheel(args.wheel, Path(scratch) / "venv")
                problems += check_agent(program, agent_args, home)
        except CheckError as exc:
            print(f"registry_check: {exc}", file=sys.stderr)
            return 2
    for problem in problems:
        print(f"registry_check: {problem}", file=sys.stderr)
    if not problems:
        print("registry_check: agent.json, its icon and the agent's initialize pass")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
