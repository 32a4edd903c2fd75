"""Raw Chat Completions probes, and the shape of what a server answered to them.

Owns the wire half of `scripts/real_server_check.py`: `run_probes` sends the same four
requests to any Chat Completions server (a streamed answer with usage asked for, the same
answer unstreamed, an orphan `tool` message, and a streamed answer that must call a tool), and
`shape_of` reduces each answer to the facts a client depends on (which keys a chunk carries,
whether the first chunk names the role, what the usage chunk looks like, the finish reasons,
how a tool call's first fragment is shaped, the status and envelope of an error). `differences`
lists, fact by fact, where two servers' shapes disagree; `model_facts` lists apart the facts
that depend on what the model chose to say (`MODEL_DEPENDENT`: where it stopped, whether it
called the tool, whether its answer opened outside ASCII — then llama.cpp sends no role chunk,
so the first chunk's facts are not compared).

Invariant: a shape holds only facts, never generated text or ids, so the fake and a real
model's answers compare equal exactly when a client could not tell their wires apart; the
facts a model decides are never counted as a difference of the wire.

Why: the fake (`defect_fakeapi/chat*.py`) was written from the documentation; these probes are
how a real server's drift from it is seen, and the same code runs against the fake in
`tests/test_real_server_check.py`, so the comparison itself is tested.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

__all__ = [
    "MODEL_DEPENDENT",
    "Probe",
    "differences",
    "model_facts",
    "probe_bodies",
    "run_probes",
    "shape_of",
    "sse_events",
]

MODEL_DEPENDENT = ("finish_reasons", "tool_call_opening", "opens_outside_ascii")
FIRST_CHUNK = ("first_delta", "first_delta_names_role")

Probe = dict[str, Any]
"""What one probe saw: `status`, and `chunks` (streamed) or `body` (not streamed)."""

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def probe_bodies(model: str) -> dict[str, dict[str, Any]]:
    """The request body of each probe, by name."""
    hello = [{"role": "user", "content": "Say hello in five words."}]
    return {
        "stream": {
            "model": model,
            "messages": hello,
            "max_tokens": 16,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        "plain": {"model": model, "messages": hello, "max_tokens": 16},
        "orphan_tool": {
            "model": model,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "call_orphan1", "content": "out"},
            ],
            "max_tokens": 4,
        },
        "tool_call": {
            "model": model,
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "max_tokens": 64,
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [TOOL],
            "tool_choice": "required",
        },
    }


def sse_events(raw: bytes) -> list[Any]:
    """The JSON objects of an SSE body's `data:` lines (`[DONE]` as the string "[DONE]")."""
    events: list[Any] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _post(url: str, body: dict[str, Any], key: str, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def run_probes(base_url: str, model: str, key: str, timeout: float = 300.0) -> dict[str, Probe]:
    """Send every probe to the server at `base_url` (ending in `/v1`), one after another."""
    seen: dict[str, Probe] = {}
    for name, body in probe_bodies(model).items():
        status, raw = _post(f"{base_url}/chat/completions", body, key, timeout)
        probe: Probe = {"status": status}
        if body.get("stream") and status == 200:
            probe["chunks"] = sse_events(raw)
        else:
            try:
                probe["body"] = json.loads(raw)
            except ValueError:
                probe["body"] = raw.decode("utf-8", "replace")
        seen[name] = probe
    return seen


def _keys(obj: Any) -> list[str]:
    return sorted(obj) if isinstance(obj, dict) else []


def _stream_shape(chunks: list[Any]) -> dict[str, Any]:
    objects = [c for c in chunks if isinstance(c, dict)]
    with_choices = [c for c in objects if c.get("choices")]
    usage_chunks = [c for c in objects if not c.get("choices") and c.get("usage")]
    first = with_choices[0]["choices"][0] if with_choices else {}
    first_delta = first.get("delta", {})
    finishing = [c["choices"][0] for c in with_choices if c["choices"][0].get("finish_reason")]
    calls = [
        call
        for c in with_choices
        for call in c["choices"][0].get("delta", {}).get("tool_calls") or []
    ]
    opening = calls[0] if calls else {}
    usage = usage_chunks[-1] if usage_chunks else {}
    text = "".join(c["choices"][0].get("delta", {}).get("content") or "" for c in with_choices)
    return {
        "opens_outside_ascii": not text[:1].isascii(),
        "ends_with_done": bool(chunks) and chunks[-1] == "[DONE]",
        "chunk_keys": sorted({k for c in with_choices for k in c}),
        "choice_keys": sorted({k for c in with_choices for k in c["choices"][0]}),
        "first_delta": {k: type(v).__name__ for k, v in sorted(first_delta.items())},
        "first_delta_names_role": first_delta.get("role") == "assistant",
        "usage_null_on_choice_chunks": any(
            "usage" in c and c["usage"] is None for c in with_choices
        ),
        "finish_reasons": sorted({c["finish_reason"] for c in finishing}),
        "finish_delta": _keys(finishing[-1].get("delta")) if finishing else None,
        "usage_chunk": bool(usage),
        "usage_chunk_choices": usage.get("choices") if usage else None,
        "usage_chunk_keys": _keys(usage),
        "usage_keys": _keys(usage.get("usage")),
        "tool_call_opening": {
            "keys": _keys(opening),
            "function_keys": _keys(opening.get("function")),
            "arguments_in_opening": bool((opening.get("function") or {}).get("arguments")),
        }
        if opening
        else None,
    }


def shape_of(name: str, probe: Probe) -> dict[str, Any]:
    """The client-visible facts of one probe's answer (see the module docstring)."""
    shape: dict[str, Any] = {"status": probe["status"]}
    if "chunks" in probe:
        shape.update(_stream_shape(probe["chunks"]))
        return shape
    body = probe.get("body")
    if probe["status"] != 200:
        shape["error_envelope"] = _keys(body)
        shape["error_keys"] = _keys(body.get("error")) if isinstance(body, dict) else []
        return shape
    if isinstance(body, dict) and body.get("choices"):
        choice = body["choices"][0]
        shape["body_keys"] = _keys(body)
        shape["choice_keys"] = _keys(choice)
        shape["message_keys"] = _keys(choice.get("message"))
        shape["usage_keys"] = _keys(body.get("usage"))
        if name == "orphan_tool":
            shape = {"status": probe["status"], "accepted": True}
    return shape


def model_facts(real: dict[str, Probe]) -> list[str]:
    """The `MODEL_DEPENDENT` facts of each streamed probe, one line each."""
    lines: list[str] = []
    for name, probe in real.items():
        shape = shape_of(name, probe)
        lines.extend(
            f"{name}.{fact}: {json.dumps(shape[fact])}" for fact in MODEL_DEPENDENT if fact in shape
        )
    return lines


def differences(fake: dict[str, Probe], real: dict[str, Probe]) -> list[str]:
    """One line per fact of the wire where the real server's answer differs from the fake's."""
    lines: list[str] = []
    for name in probe_bodies(""):
        if name not in fake or name not in real:
            continue
        ours, theirs = shape_of(name, fake[name]), shape_of(name, real[name])
        for fact in sorted(set(ours) | set(theirs)):
            if fact in MODEL_DEPENDENT:
                continue
            opens_outside = ours.get("opens_outside_ascii") or theirs.get("opens_outside_ascii")
            if fact in FIRST_CHUNK and opens_outside:
                continue
            if ours.get(fact) != theirs.get(fact):
                lines.append(
                    f"{name}.{fact}: fake {json.dumps(ours.get(fact))} "
                    f"/ real {json.dumps(theirs.get(fact))}"
                )
    return lines
