"""What the fake API's HTTP side asks of the object that owns it: `ApiBackend`.

Owns the `ApiBackend` protocol: the settings a handler reads (the keys and the Bedrock
region, the model list and its gate or failure, the validation switches, the prompt cache),
the script it draws replies from, the signatures it mints and checks, and the request log and
connection set it keeps current. `FakeProvider` (`server.py`) is the one implementation.

Invariant: `http.py` names no module above it. It types its server's owner with this
protocol, never with `FakeProvider`, so the import graph of the package has no cycle:
`server` → `http` → `backend` → (`cache`, `chat_cache`, `script`).

Why a module of its own: the handler needs the provider's shape and the provider needs the
handler's server; the shape is the shared piece, and it lives below both.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Protocol

from defect_fakeapi.cache import PromptCache
from defect_fakeapi.chat_cache import ChatPrefixCache
from defect_fakeapi.script import HttpError, Reply, RequestRecord


class ApiBackend(Protocol):
    """The owner of an `ApiServer`, as its handlers use it (`FakeProvider`)."""

    api_key: str
    aws_access_key_id: str
    aws_region: str | None
    bedrock_bearer_token: str | None
    allow_prefill: bool
    allow_split_results: bool
    prompt_cache: PromptCache | None
    models: list[dict[str, Any]]
    models_gate: threading.Event | None
    models_error: HttpError | None
    chat_models: list[str]
    chat_reasoning_models: set[str]
    chat_key_required: bool
    chat_reasoning_field: str
    chat_prompt_cache: ChatPrefixCache | None
    _stopping: threading.Event

    def sign(self, thinking: str) -> str: ...

    def check_signature(self, thinking: str, signature: str) -> bool: ...

    def _next_reply(self, record: RequestRecord) -> Reply | None: ...

    def _exhausted_message(self, record: RequestRecord) -> str: ...

    def _new_record(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, *, listing: bool = False
    ) -> RequestRecord: ...

    def _progress(self, record: RequestRecord, events_sent: int) -> None: ...

    def _complete(self, record: RequestRecord) -> None: ...

    def _register(self, connection: socket.socket) -> None: ...

    def _unregister(self, connection: socket.socket) -> None: ...
