"""Validation of what the agent writes against the ACP JSON Schema (stable v1).

Owns `AcpSchema`: it validates each message the agent sends — a response against the schema
of the method it answers, a notification or reverse request against the schema of its
method — so a test fails on the first message a real client could reject.

The schema is vendored in `tests/schema/schema.v1.json` (see `tests/schema/README.md` for its
version and `scripts/refresh_acp_schema.py` to refresh it); `$ACP_SCHEMA` points elsewhere.
A schema that cannot be loaded raises `SchemaUnavailable`: a test never runs unvalidated.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

RESPONSES = {
    "initialize": "InitializeResponse",
    "authenticate": "AuthenticateResponse",
    "logout": "LogoutResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/delete": "DeleteSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/close": "CloseSessionResponse",
    "session/set_mode": "SetSessionModeResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
    "session/prompt": "PromptResponse",
}
AGENT_REQUESTS = {
    "session/request_permission": "RequestPermissionRequest",
    "fs/read_text_file": "ReadTextFileRequest",
    "fs/write_text_file": "WriteTextFileRequest",
    "terminal/create": "CreateTerminalRequest",
    "terminal/output": "TerminalOutputRequest",
    "terminal/wait_for_exit": "WaitForTerminalExitRequest",
    "terminal/kill": "KillTerminalRequest",
    "terminal/release": "ReleaseTerminalRequest",
    "elicitation/create": "CreateElicitationRequest",
}
CLIENT_RESPONSES = {"elicitation/create": "CreateElicitationResponse"}
"""What the test's client answers to the agent's requests, checked too (both directions)."""
AGENT_NOTIFICATIONS = {
    "session/update": "SessionNotification",
    "elicitation/complete": "CompleteElicitationNotification",
}


SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schema"
"""The vendored ACP schema (`tests/schema/`)."""


def schema_path() -> Path:
    env = os.environ.get("ACP_SCHEMA")
    if env:
        return Path(env)
    return SCHEMA_DIR / "schema.v1.json"


class SchemaViolation(AssertionError):
    pass


class SchemaUnavailable(AssertionError):
    """The ACP schema could not be loaded: nothing can be validated, so the test fails."""


class AcpSchema:
    def __init__(self, path: Path | None = None) -> None:
        path = path or schema_path()
        try:
            self.document = json.loads(path.read_text())
            if not isinstance(self.document.get("$defs"), dict):
                raise ValueError("it has no $defs")
        except (OSError, ValueError) as exc:
            raise SchemaUnavailable(f"cannot load the ACP schema {path}: {exc}") from exc
        resource = Resource.from_contents(self.document)
        self._registry: Registry[Any] = Registry().with_resource("urn:acp", resource)
        self._validators: dict[str, Draft202012Validator] = {}

    def _validator(self, definition: str) -> Draft202012Validator:
        if definition not in self._validators:
            if definition not in self.document["$defs"]:
                raise KeyError(f"the ACP schema has no definition {definition!r}")
            self._validators[definition] = Draft202012Validator(
                {"$ref": f"urn:acp#/$defs/{definition}"}, registry=self._registry
            )
        return self._validators[definition]

    def check(self, definition: str, value: Any, what: str) -> None:
        errors = sorted(self._validator(definition).iter_errors(value), key=lambda e: e.path)
        if errors:
            first = errors[0]
            location = "/".join(str(p) for p in first.absolute_path)
            raise SchemaViolation(
                f"{what} does not match {definition} at /{location}: {first.message}\n"
                f"message: {json.dumps(value)[:2000]}"
            )

    def check_agent_message(self, message: dict[str, Any], answered_method: str | None) -> None:
        """Validate one message written by the agent."""
        if message.get("jsonrpc") != "2.0":
            raise SchemaViolation(f"not JSON-RPC 2.0: {message}")
        method = message.get("method")
        if method is not None:
            if method in AGENT_NOTIFICATIONS and "id" not in message:
                self.check(AGENT_NOTIFICATIONS[method], message.get("params"), method)
            elif method in AGENT_REQUESTS and "id" in message:
                self.check(AGENT_REQUESTS[method], message.get("params"), method)
            else:
                raise SchemaViolation(f"the agent sent an unknown method {method!r}")
            return
        if "error" in message:
            error = message["error"]
            self.check("Error", error, "error response")
            text = error.get("message", "")
            if not text or "\n" in text:
                raise SchemaViolation(f"error messages must be one non-empty line: {error!r}")
            return
        if answered_method in RESPONSES:
            self.check(
                RESPONSES[answered_method], message.get("result"), f"{answered_method} result"
            )

    def check_client_response(self, message: dict[str, Any], method: str | None) -> None:
        """Validate the test client's answer to an agent request of `method`."""
        if method in CLIENT_RESPONSES and "result" in message:
            self.check(CLIENT_RESPONSES[method], message["result"], f"the client's {method} result")


@cache
def acp_schema() -> AcpSchema:
    return AcpSchema()
