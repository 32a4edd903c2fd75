"""`defect fake-api` (also `python -m defect_fakeapi`): serve a script to another process.

Owns `main`: parse the flags, start a `FakeProvider` on 127.0.0.1 (`--port 0` picks a free
port), enqueue the script, print the base URL — and nothing else — on stdout, and serve until
SIGINT/SIGTERM. `--request-log FILE` appends one JSON line per request. The `--chat-*` flags
make the Chat Completions side play a given server: the models it lists and which of them take
`reasoning_effort`, the field its reasoning streams in, and no key (a local server).

Invariant: stdout carries exactly one line, the URL, so a caller can read it and go.

Why: `defect transcript` runs `provider_fake` transcripts against this command, and a
developer can point a real agent at it (`ANTHROPIC_BASE_URL`, or a `[providers.NAME]` table of
`kind = "openai"` with `base_url = "<URL>/v1"`: the same script answers on the Chat
Completions wire) to replay a failure offline.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from defect_fakeapi.chat_stream import REASONING_FIELDS
from defect_fakeapi.script import Reply, load_script
from defect_fakeapi.server import DEFAULT_API_KEY, DEFAULT_AWS_ACCESS_KEY_ID, FakeProvider


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a JSON script until SIGTERM/SIGINT; print the base URL (only) on stdout."""
    parser = argparse.ArgumentParser(prog="defect fake-api")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", help="JSON list of replies (see Reply.from_dict)")
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    parser.add_argument("--aws-access-key-id", default=DEFAULT_AWS_ACCESS_KEY_ID)
    parser.add_argument("--default-text", help="answer this text when the script is empty")
    parser.add_argument("--allow-prefill", action="store_true")
    parser.add_argument("--request-log", help="append one JSON line per request to this file")
    parser.add_argument("--chat-models", help="comma-separated ids GET /v1/models lists (chat)")
    parser.add_argument(
        "--chat-reasoning-models", help="comma-separated chat models that take reasoning_effort"
    )
    parser.add_argument(
        "--chat-reasoning-field",
        choices=REASONING_FIELDS,
        default="reasoning_content",
        help="the delta field thinking streams in (DeepSeek's or OpenRouter's)",
    )
    parser.add_argument(
        "--chat-no-key",
        action="store_true",
        help="the chat routes take any key or none, as a local server does",
    )
    args = parser.parse_args(argv)

    replies = load_script(args.script) if args.script else []
    provider = FakeProvider(
        api_key=args.api_key,
        aws_access_key_id=args.aws_access_key_id,
        default_reply=Reply.text(args.default_text) if args.default_text else None,
        allow_prefill=args.allow_prefill,
        host=args.host,
        port=args.port,
        request_log=args.request_log,
    )
    if args.chat_models is not None:
        provider.chat_models = _names(args.chat_models)
    if args.chat_reasoning_models is not None:
        provider.chat_reasoning_models = set(_names(args.chat_reasoning_models))
    provider.chat_reasoning_field = args.chat_reasoning_field
    provider.chat_key_required = not args.chat_no_key
    provider.enqueue(*replies)
    finished = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        finished.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with provider:
        sys.stdout.write(provider.url + "\n")
        sys.stdout.flush()
        while not finished.wait(0.2):
            pass
    return 0


def _names(listed: str) -> list[str]:
    return [name.strip() for name in listed.split(",") if name.strip()]


if __name__ == "__main__":
    raise SystemExit(main())
