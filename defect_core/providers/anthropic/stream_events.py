"""The stream's events as the SDK reads them, with the deltas read without a model apiece.

Owns `stream_event`, which turns one event of a streamed Messages call, as the SDK's
`AsyncStream` parsed it (`call.create_stream` asks the SDK for the JSON itself), into what
`StreamAssembler` is fed. A `content_block_delta` of a known kind (text, thinking, tool input,
signature) whose fields have the types the API documents becomes a `ContentDelta` read
straight off the JSON; every other event is built as the SDK's own stream builds it, from
public names only: validated as `anthropic.types.RawMessageStreamEvent` (pydantic's
`TypeAdapter`, lax, as the SDK validates a union), or, where that fails (a field the API
added, a block of a kind this SDK does not know), built by the model its type names without
validation (`model_construct`, as the SDK falls back to). An event of a type the union does
not name becomes an `OtherEvent`, which the assembler skips as it skips the SDK's object.

Invariants:
- What `StreamAssembler` reads of an event (`defect_core/providers/anthropic/stream.py`: it
  reads by attribute) is the same either way: `type`, `index`, `delta.type` and the delta's
  one text field. A delta of another shape (unknown kind, a field of another type) takes the
  SDK's model, so the assembler sees what it always saw for it. A test builds every event
  both ways and compares (tests/test_provider_anthropic_stream_events.py).
- Public API only: the event models `anthropic.types` exports and pydantic's
  `model_construct`; no private name of the SDK (tests/test_sdk_quarantine.py).
- Where the SDK's stream is iterated (Bedrock; anywhere `call.stream_batches` does not read
  the bytes itself) the SDK still owns SSE decoding, `ping`s, in-stream `error` events and
  its stream observer; only the per-event build is ours (asked for `object`, the SDK hands
  each event's JSON over as it parsed it). On the Anthropic API route the JSON comes from
  defect's own SSE reader (`sse.py`), which hands over the same JSON.
- An event that is not JSON but already the SDK's object (where `call.py` leaves the call
  and its iteration to the SDK, the SDK's internals being unknown) is handed on as it is.
- Cheap until used: importing this module loads no SDK.

Why: a fast stream is almost all deltas, and the SDK's build of each (a pydantic model of a
discriminated union, picked and constructed field by field) cost several times the JSON
parse, on the event loop that also forwards the deltas to the editor: under a burst of
deltas that CPU time was the latency (scripts/bench_turn.py measures it). Taking the JSON
rather than a type with its own `build` also spares the SDK's runtime protocol check per
event.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["ContentDelta", "DeltaBody", "OtherEvent", "content_delta", "stream_event"]

_DELTA_FIELDS: dict[str, str] = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
    "signature_delta": "signature",
}
"""A delta's kind → the one field that carries its text."""


class DeltaBody(NamedTuple):
    """The `delta` of a `content_block_delta`: its kind, and its text in the field the API
    names for that kind (the others stay empty)."""

    type: str
    text: str = ""
    thinking: str = ""
    partial_json: str = ""
    signature: str = ""


class ContentDelta(NamedTuple):
    """A `content_block_delta` event of a known kind."""

    index: int  # type: ignore[assignment]  # the event's field (it shadows `tuple.index`)
    delta: DeltaBody
    type: str = "content_block_delta"


_BODIES: dict[str, Callable[[str], DeltaBody]] = {
    "text": lambda value: DeltaBody("text_delta", value),
    "thinking": lambda value: DeltaBody("thinking_delta", "", value),
    "partial_json": lambda value: DeltaBody("input_json_delta", "", "", value),
    "signature": lambda value: DeltaBody("signature_delta", "", "", "", value),
}
"""The field that carries a delta's text → its body, built from that text (positional: a
body is built per delta, and keywords cost more)."""


def content_delta(data: object) -> ContentDelta | None:
    """`data` (one event's parsed JSON) as a `ContentDelta`, or None when it is another event
    or a delta of another shape."""
    if type(data) is not dict or data.get("type") != "content_block_delta":
        return None
    index, delta = data.get("index"), data.get("delta")
    if type(index) is not int or type(delta) is not dict:
        return None
    kind = delta.get("type")
    name = _DELTA_FIELDS.get(kind) if type(kind) is str else None
    if name is None or type(value := delta.get(name)) is not str:
        return None
    return ContentDelta(index, _BODIES[name](value))


class OtherEvent(NamedTuple):
    """An event of a type this module does not know: only its `type`, which the assembler
    reads and skips."""

    type: str


_EVENT_MODELS: dict[str, str] = {
    "message_start": "RawMessageStartEvent",
    "message_delta": "RawMessageDeltaEvent",
    "message_stop": "RawMessageStopEvent",
    "content_block_start": "RawContentBlockStartEvent",
    "content_block_delta": "RawContentBlockDeltaEvent",
    "content_block_stop": "RawContentBlockStopEvent",
}
"""Each event type of `RawMessageStreamEvent` → its model's name in `anthropic.types`."""
_adapter: list[Any] = []
"""The union's `TypeAdapter`, built on the first event that needs it (then kept)."""


def stream_event(data: object) -> Any:
    """One event, from its parsed JSON: a `ContentDelta`, the SDK's model of its type (as
    the SDK's stream builds it), or an `OtherEvent`."""
    fast = content_delta(data)
    if fast is not None:
        return fast
    if type(data) is not dict:
        return data  # already the SDK's event: its own call and iteration (`call.py`)
    kind = data.get("type")
    name = _EVENT_MODELS.get(kind) if type(kind) is str else None
    if name is None:
        return OtherEvent(str(kind))
    types = importlib.import_module("anthropic.types")
    if not _adapter:
        pydantic = importlib.import_module("pydantic")
        _adapter.append(pydantic.TypeAdapter(types.RawMessageStreamEvent))
    try:
        return _adapter[0].validate_python(data)
    except ValueError:  # pydantic's ValidationError: the SDK then builds without checking
        return getattr(types, name).model_construct(**data)
