"""The rules of a Chat Completions request (`POST /v1/chat/completions`), as servers keep them.

Owns `validate_chat_request`: the first rule a body breaks raises `ChatWireError`, which the
HTTP side answers with OpenAI's 400 envelope
`{"error": {"message", "type": "invalid_request_error", "param", "code"}}`. The rules, in order:

1. Shape: `model` a string, `messages` a non-empty list of objects, `stream` a boolean,
   `stream_options` only with `stream: true`, no unknown top-level parameter; `tools` a list of
   `{"type": "function", "function": {"name", ...}}` with names `^[a-zA-Z0-9_-]{1,64}$`, unique.
2. Each message: its `role` one of `system`, `developer`, `user`, `assistant`, `tool`
   (`function` is refused as deprecated); its keys those of its role; its content of the shapes
   that role takes (text parts, and `image_url` parts in user messages only).
3. Tool calls: each `{"id", "type": "function", "function": {"name", "arguments"}}`, the id at
   most 40 characters and unique in the request, `arguments` a string holding JSON.
4. Pairing: a `tool` message answers, by `tool_call_id`, an entry of the nearest assistant
   message's `tool_calls` not yet answered ("messages with role 'tool' must be a response to a
   preceeding message with 'tool_calls'"); every entry is answered by a `tool` message before
   the next user, system or assistant message, or the end ("An assistant message with
   'tool_calls' must be followed by tool messages responding to each 'tool_call_id'").
5. Parameters a model does not take: `reasoning_effort` only to a model the fake lists as a
   reasoning model ("Unsupported parameter").

Invariant: a body that passes is one every mainstream Chat Completions server (OpenAI, vLLM,
llama.cpp's server, DeepSeek) accepts; the wordings are OpenAI's, typo included, so an agent
that shows the server's message shows what a user of the real service would read.

Why a module of its own: these rules are the second wire's, independent of the Messages rules
beside them (`validation.py`, `shape.py`), and `tests/test_fakeapi_chat.py` proves them one
by one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from defect_fakeapi.shape import WireError

__all__ = ["MAX_TOOL_CALL_ID", "ChatWireError", "validate_chat_request"]

MAX_TOOL_CALL_ID = 40
"""The longest `tool_calls[].id` OpenAI accepts."""

_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
_ROLE_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "refusal"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_TOP_KEYS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "reasoning_effort",
        "user",
        "seed",
        "n",
    }
)
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class ChatWireError(WireError):
    """OpenAI's 400: `error.message`, `error.type`, and the `param` and `code` it names."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(400, "invalid_request_error", message)
        self.param = param
        self.code = code

    def envelope(self) -> dict[str, Any]:
        """The body the real server answers."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _type_error(param: str, expected: str, value: object) -> ChatWireError:
    return ChatWireError(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
        param,
        "invalid_type",
    )


def validate_chat_request(
    body: object, *, reasoning_models: Collection[str] = ()
) -> Mapping[str, Any]:
    """`body` when it is a request the real server accepts; else `ChatWireError` for the first
    rule it breaks. `reasoning_models`: the models that take `reasoning_effort`."""
    if not isinstance(body, dict):
        raise ChatWireError("We could not parse the JSON body of your request.", None, None)
    for key in body:
        if key not in _TOP_KEYS:
            raise ChatWireError(f"Unrecognized request argument supplied: {key}", key, None)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ChatWireError("you must provide a model parameter", "model", None)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _type_error("stream", "a boolean", stream)
    if "stream_options" in body:
        if not stream:
            raise ChatWireError(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options",
                None,
            )
        if not isinstance(body["stream_options"], dict):
            raise _type_error("stream_options", "an object", body["stream_options"])
    if "reasoning_effort" in body:
        if model not in reasoning_models:
            raise ChatWireError(
                "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                "reasoning_effort",
                "unsupported_parameter",
            )
        if body["reasoning_effort"] not in ("minimal", "low", "medium", "high"):
            raise ChatWireError(
                f"Invalid value: {body['reasoning_effort']!r}. Supported values are: 'minimal', "
                "'low', 'medium', and 'high'.",
                "reasoning_effort",
                "invalid_value",
            )
    _check_tools(body.get("tools"))
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _type_error("messages", "an array", messages)
    if not messages:
        raise ChatWireError("[] is too short - 'messages'", "messages", "empty_array")
    for index, message in enumerate(messages):
        _check_message(index, message)
    _check_pairing(messages)
    return body


def _check_tools(tools: object) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _type_error("tools", "an array", tools)
    names: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ChatWireError(
                f"Invalid value for '{where}.type': expected 'function'.", where, "invalid_value"
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise _type_error(f"{where}.function", "an object", function)
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise ChatWireError(
                f"Invalid '{where}.function.name': string does not match pattern. Expected a "
                "string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                f"{where}.function.name",
                "invalid_value",
            )
        if name in names:
            raise ChatWireError(
                f"Tool names must be unique; '{name}' is repeated.", "tools", "invalid_value"
            )
        names.add(name)
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise _type_error(f"{where}.function.parameters", "an object", function["parameters"])


def _check_message(index: int, message: object) -> None:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise _type_error(where, "an object", message)
    role = message.get("role")
    if role not in _ROLES:
        raise ChatWireError(
            f"Invalid value: {role!r}. Supported values are: 'system', 'assistant', 'user', "
            "'function', 'tool', and 'developer'.",
            f"{where}.role",
            "invalid_value",
        )
    if role == "function":
        raise ChatWireError(
            "The 'function' role is deprecated; use 'tool' messages.", f"{where}.role", None
        )
    for key in message:
        if key not in _ROLE_KEYS[role]:
            raise ChatWireError(
                f"Additional properties are not allowed ('{key}' was unexpected) - '{where}'",
                f"{where}.{key}",
                None,
            )
    content = message.get("content")
    if role == "assistant":
        calls = message.get("tool_calls")
        if content is None and not calls:
            raise ChatWireError(
                f"Invalid value for '{where}.content': expected a string, got null.",
                f"{where}.content",
                None,
            )
        if content is not None:
            _check_content(f"{where}.content", content, images=False)
        if calls is not None:
            _check_tool_calls(where, calls)
        return
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise _type_error(f"{where}.tool_call_id", "a string", call_id)
    _check_content(f"{where}.content", content, images=role == "user")


def _check_content(where: str, content: object, *, images: bool) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _type_error(where, "one of a string or array of objects", content)
    if not content:
        raise ChatWireError(f"Invalid '{where}': empty array.", where, "empty_array")
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part, dict) and isinstance(part.get("text"), str):
            continue
        if kind == "image_url" and images and isinstance(part, dict):
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if isinstance(url, str) and (url.startswith(("http://", "https://", "data:image/"))):
                continue
            raise ChatWireError(
                f"Invalid '{at}.image_url.url': expected an http(s) URL or a base64 data URL.",
                f"{at}.image_url.url",
                "invalid_value",
            )
        allowed = "'text' and 'image_url'" if images else "'text'"
        raise ChatWireError(
            f"Invalid value: {kind!r}. Supported values are: {allowed}.",
            f"{at}.type",
            "invalid_value",
        )


def _check_tool_calls(where: str, calls: object) -> None:
    if not isinstance(calls, list):
        raise _type_error(f"{where}.tool_calls", "an array", calls)
    if not calls:
        raise ChatWireError(
            f"Invalid '{where}.tool_calls': empty array. Expected an array with minimum length "
            "1, but got an empty array instead.",
            f"{where}.tool_calls",
            "empty_array",
        )
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        if not isinstance(call, dict):
            raise _type_error(at, "an object", call)
        call_id = call.get("id")
        if not isinstance(call_id, str):
            raise _type_error(f"{at}.id", "a string", call_id)
        if len(call_id) > MAX_TOOL_CALL_ID:
            raise ChatWireError(
                f"Invalid '{at}.id': string too long. Expected a string with maximum length "
                f"{MAX_TOOL_CALL_ID}, but got a string with length {len(call_id)} instead.",
                f"{at}.id",
                "string_above_max_length",
            )
        if call.get("type") != "function":
            raise ChatWireError(
                f"Invalid value for '{at}.type': expected 'function'.", f"{at}.type", None
            )
        function = call.get("function")
        if not isinstance(function, dict):
            raise _type_error(f"{at}.function", "an object", function)
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise ChatWireError(
                f"Invalid '{at}.function.name': string does not match pattern.",
                f"{at}.function.name",
                "invalid_value",
            )
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            raise _type_error(f"{at}.function.arguments", "a string", arguments)
        try:
            json.loads(arguments)
        except ValueError:
            raise ChatWireError(
                f"Invalid '{at}.function.arguments': the arguments are not valid JSON.",
                f"{at}.function.arguments",
                "invalid_value",
            ) from None


def _check_pairing(messages: list[Any]) -> None:
    seen: set[str] = set()
    open_calls: dict[str, int] = {}
    """The unanswered calls of the latest assistant message, and where it stood."""
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in open_calls:
                raise ChatWireError(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{index}].role",
                    None,
                )
            del open_calls[call_id]
            continue
        _unanswered(open_calls)
        open_calls = {}
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                if call["id"] in seen:
                    raise ChatWireError(
                        f"Duplicate value for 'tool_call_id' of {call['id']} in message[{index}]",
                        f"messages.[{index}].tool_calls",
                        None,
                    )
                seen.add(call["id"])
                open_calls[call["id"]] = index
    _unanswered(open_calls)


def _unanswered(open_calls: dict[str, int]) -> None:
    if not open_calls:
        return
    where = min(open_calls.values())
    raise ChatWireError(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(open_calls),
        f"messages.[{where}].role",
        None,
    )
