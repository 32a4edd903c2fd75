"""What the processes defect starts inherit of its environment: everything but the secrets.

Owns `EnvPolicy` (which variables a process defect starts does not get, and which the user
passes through anyway), `is_secret_name` (a name that marks its variable as a secret) and
`PROVIDER_CREDENTIALS` (the variables the providers read credentials from).

Invariants:
- Commands (`bash`, locally or in the editor's terminal), hooks and stdio MCP servers get
  defect's environment minus the provider credentials defect reads (`PROVIDER_CREDENTIALS`
  and every `api_key_env` of the settings) and minus every variable whose name marks it as a
  secret (`*_KEY`, `*_SECRET`, `*_TOKEN`, `*PASSWORD*`, `*_API_KEY`, `*_ACCESS_KEY*`, ...;
  case-insensitive), as Codex's default shell environment policy does: a command that prints
  `env` shows the model none of them.
- Only the names in `passthrough` are given back (`[command_environment] pass`, which only the
  user's own configuration file may set, `defect_core/config/files.py`): a repository cannot
  ask for the user's tokens.
- What a caller names explicitly (an MCP server's `env`, a hook's `DEFECT_*` variables, the
  `bash` tool's pager settings) is laid over the filtered environment and kept as given.
- Values are never logged: this module logs nothing, and callers log names at most.

Why apart: the local shell (`tools/backends.py`), the editor's terminal
(`defect_acp/delegate.py`), the hook runner (`hooks/runner.py`) and the MCP connection
(`mcp/connection.py`) each start processes; one policy, stated once, keeps them in agreement,
and the redaction of what a failing server printed (`redaction.py`) reads the secret values
through it. Standard library only, in the lowest layer, so every one of them may import it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_POLICY", "PROVIDER_CREDENTIALS", "EnvPolicy", "is_secret_name"]

PROVIDER_CREDENTIALS: frozenset[str] = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_BEARER_TOKEN_BEDROCK",
    }
)
"""The variables the providers read credentials from (the `anthropic` SDK, boto3), whatever
the patterns say of their names; the settings add each `api_key_env` they name."""

_SECRET_NAME = re.compile(
    r"(?:^|_)(?:KEY|SECRET|TOKEN)S?$"  # *_KEY, *_SECRET, *_TOKEN
    r"|(?:^|_)(?:SECRET|TOKEN)S?_"  # *_SECRET_*, *_TOKEN_* (AWS_BEARER_TOKEN_BEDROCK)
    r"|PASSWORD|PASSWD|PASSPHRASE"
    r"|_API_?KEY|_ACCESS_KEY|_PRIVATE_KEY",
    re.IGNORECASE,
)

_MIN_SECRET_CHARS = 6
"""A value shorter than this is not worth redacting (`1`, `true`): it would garble text."""


def is_secret_name(name: str) -> bool:
    """Does `name` mark its variable as a secret (`GITHUB_TOKEN`, `PGPASSWORD`, ...)?"""
    return _SECRET_NAME.search(name) is not None


@dataclass(frozen=True, slots=True)
class EnvPolicy:
    """Which of defect's variables a process it starts does not inherit."""

    credentials: frozenset[str] = frozenset()
    """Names the settings read credentials from (`api_key_env`), beyond the built-in ones."""
    passthrough: frozenset[str] = frozenset()
    """Names given to the processes all the same (`[command_environment] pass`)."""

    @classmethod
    def of(cls, credentials: Iterable[str] = (), passthrough: Iterable[str] = ()) -> EnvPolicy:
        return cls(frozenset(credentials), frozenset(passthrough))

    def withholds(self, name: str) -> bool:
        """Is the variable `name` kept from the processes defect starts?"""
        if name in self.passthrough:
            return False
        return name in PROVIDER_CREDENTIALS or name in self.credentials or is_secret_name(name)

    def withheld(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The names of `environ` (default: defect's own) a process does not get, sorted."""
        source = os.environ if environ is None else environ
        return sorted(name for name in source if self.withholds(name))

    def apply(
        self, environ: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The environment of a process: `environ` (default: defect's own) without what it
        withholds, with `extra` (what the caller names explicitly) laid over it."""
        source = os.environ if environ is None else environ
        kept = {name: value for name, value in source.items() if not self.withholds(name)}
        if extra:
            kept.update(extra)
        return kept

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The values of the secret variables of `environ` (passed through or not), for
        redaction: a process may print one of them, and it must not be shown."""
        source = os.environ if environ is None else environ
        return [
            value
            for name, value in source.items()
            if len(value) >= _MIN_SECRET_CHARS
            and (name in PROVIDER_CREDENTIALS or name in self.credentials or is_secret_name(name))
        ]


DEFAULT_POLICY = EnvPolicy()
"""The built-in credentials and the secret-looking names, nothing passed through: what a
process gets when its caller has no settings at hand (a library use, a test)."""
