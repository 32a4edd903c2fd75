"""The stored credentials: `<user config dir>/defect/credentials.toml`, written by `defect login`.

Owns where the file is (`credentials_file`), reading it (`read_credentials`, and the cheap,
cached look-up a provider makes when it builds a client: `stored_credential`), changing one
provider's entry (`save_credential`, `remove_credentials`) and the value that carries a
secret without showing it (`Secret`). One table per provider name (`anthropic`, `bedrock`,
each `[providers.NAME]` of the user's configuration):

    [anthropic]
    api_key = "sk-ant-…"

    [bedrock]            # a named AWS profile (SSO included) or a bearer token, and a region
    profile = "work-sso"
    region = "us-east-1"

Precedence (docs/security.md): the environment (`ANTHROPIC_API_KEY`, the variable
`api_key_env` names, `AWS_BEARER_TOKEN_BEDROCK`, `AWS_ACCESS_KEY_ID`, `AWS_PROFILE`) beats
what is stored here, which beats the provider's default chain (AWS: the default profile, SSO,
an instance role). The providers apply it where they look credentials up, at call time
(`providers/anthropic/client.py`, `providers/openai_compat/provider.py`).

Invariants:
- The file is the user's alone, as ssh requires of a private key: written 0600 in a 0700
  directory (`private_file.write_private`), and a file whose mode lets the group or others in
  is refused — not used — with one line saying how to fix it (`chmod 600 PATH`), logged once
  per state of the file and shown by `defect auth status`.
- A secret never shows: `Secret`'s `repr` and `str` hide it; reading one registers it with
  `redaction.remember_secret` (and the log's line filter), so no log line, transcript or error
  shows it. AWS secrets are never stored: a profile is a name boto3 resolves.
- Cheap and lazy: nothing reads the file on import or on `initialize`; a look-up stats the
  file and parses it again only when its modification time, size, inode or mode changed, so a
  `defect login` in another process is seen by the next call of a running agent.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from defect_core.config.private_file import user_config_dir, write_private
from defect_core.config.settings import ProviderSpec
from defect_core.log import filter_lines, get_logger
from defect_core.redaction import hide_remembered, remember_secret

__all__ = [
    "BEDROCK_ENVIRONMENT",
    "CredentialsError",
    "CredentialsRefused",
    "Secret",
    "StoredCredential",
    "credential_source",
    "credentials_file",
    "environment_source",
    "read_credentials",
    "remove_credentials",
    "save_credential",
    "stored_credential",
    "stored_problem",
]

BEDROCK_ENVIRONMENT = ("AWS_BEARER_TOKEN_BEDROCK", "AWS_ACCESS_KEY_ID", "AWS_PROFILE")
"""The variables that choose Bedrock's credentials in the environment (they beat the stored
ones); `providers/anthropic/client.py` watches the same ones."""

log = get_logger("defect.config")

HEADER = (
    "# Credentials stored by `defect login`: one table per provider. Private to you (mode\n"
    "# 0600); `defect logout` removes them, `defect auth status` shows where each comes from.\n"
)
_KEYS = ("api_key", "bearer_token", "profile", "region")


class Secret:
    """A secret that does not show: `repr`/`str` hide it, `reveal()` gives it to the one
    call that sends it (as `pydantic.SecretStr`, without importing pydantic)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def fingerprint(self) -> str:
        """At most the last 4 characters, for a person to tell two keys apart."""
        return f"…{self._value[-4:]}" if len(self._value) >= 12 else "…"

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class StoredCredential:
    """One provider's entry: an API key, or for Bedrock a bearer token or a profile name,
    with an optional region."""

    provider: str
    api_key: Secret | None = None
    bearer_token: Secret | None = None
    profile: str | None = None
    region: str | None = None

    def describe(self) -> str:
        """What is stored, without the secret (at most its fingerprint)."""
        if self.api_key is not None:
            return f"API key {self.api_key.fingerprint()}"
        parts = []
        if self.bearer_token is not None:
            parts.append(f"Bedrock bearer token {self.bearer_token.fingerprint()}")
        if self.profile:
            parts.append(f"AWS profile {self.profile!r}")
        if self.region:
            parts.append(f"region {self.region}")
        return ", ".join(parts) or "nothing usable"


class CredentialsError(OSError):
    """The credentials file exists but cannot be used (unreadable, not TOML, not its shape)."""


class CredentialsRefused(CredentialsError):
    """The credentials file is readable by the group or others: refused, as ssh refuses a key."""


def credentials_file(env: Mapping[str, str] | None = None) -> Path:
    """Where the stored credentials are: beside the user's `config.toml`."""
    return user_config_dir(env) / "credentials.toml"


def _check_mode(path: Path, mode: int) -> None:
    if mode & 0o077:
        raise CredentialsRefused(
            f"{path} is readable by others (mode {stat.S_IMODE(mode):o}): its credentials are "
            f"not used; run `chmod 600 {path}`"
        )


def _secret(value: object, path: Path, where: str) -> Secret:
    if not isinstance(value, str) or not value.strip():
        raise CredentialsError(f"{path}: {where} must be a non-empty string")
    remember_secret(value.strip())
    filter_lines(hide_remembered)
    return Secret(value.strip())


def _parse(path: Path, text: str) -> dict[str, StoredCredential]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CredentialsError(f"{path}: is not valid TOML: {exc}") from None
    found: dict[str, StoredCredential] = {}
    for name, table in data.items():
        if not isinstance(table, dict) or not set(table) <= set(_KEYS):
            raise CredentialsError(f"{path}: [{name}] must be a table of {', '.join(_KEYS)}")
        profile, region = table.get("profile"), table.get("region")
        if not isinstance(profile, str | None) or not isinstance(region, str | None):
            raise CredentialsError(f"{path}: [{name}] profile and region must be strings")
        found[name] = StoredCredential(
            name,
            api_key=_secret(table["api_key"], path, f"{name}.api_key")
            if "api_key" in table
            else None,
            bearer_token=_secret(table["bearer_token"], path, f"{name}.bearer_token")
            if "bearer_token" in table
            else None,
            profile=profile,
            region=region,
        )
    return found


def read_credentials(path: Path) -> dict[str, StoredCredential]:
    """Provider name → its entry; {} when there is no file. `CredentialsRefused` when the file
    is open to others, `CredentialsError` when it cannot be read or parsed."""
    try:
        with path.open("rb") as file:
            _check_mode(path, os.fstat(file.fileno()).st_mode)
            raw = file.read()
    except FileNotFoundError:
        return {}
    except CredentialsError:
        raise
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot be read: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialsError(f"{path}: is not UTF-8") from None
    return _parse(path, text)


# --- the cached look-up -------------------------------------------------------------------

_lock = threading.Lock()
_cache: dict[Path, tuple[tuple[int, int, int, int] | None, dict[str, StoredCredential], str]] = {}
"""path → (the stat it was read at, its entries, the problem that refused it or '')."""


def _load(path: Path) -> tuple[dict[str, StoredCredential], str]:
    try:
        st = path.stat()
        key: tuple[int, int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
    except OSError:
        key = None
    with _lock:
        cached = _cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        entries: dict[str, StoredCredential] = {}
        problem = ""
        if key is not None:
            try:
                entries = read_credentials(path)
            except CredentialsError as exc:
                problem = str(exc)
                log.warning("credentials_file_unusable", error=problem)
        _cache[path] = (key, entries, problem)
        return entries, problem


def stored_credential(
    provider: str, env: Mapping[str, str] | None = None
) -> StoredCredential | None:
    """`provider`'s stored entry, or None (no file, no entry, or a refused file: logged once)."""
    return _load(credentials_file(env))[0].get(provider)


def stored_problem(env: Mapping[str, str] | None = None) -> str:
    """Why the credentials file is not used ('' when it is, or when there is none)."""
    return _load(credentials_file(env))[1]


def environment_source(spec: ProviderSpec, env: Mapping[str, str] | None = None) -> str | None:
    """The environment variable that gives `spec` its credentials (it beats the stored ones),
    or None."""
    env = os.environ if env is None else env
    names: tuple[str, ...]
    if spec.kind == "bedrock":
        names = BEDROCK_ENVIRONMENT
    else:
        names = (spec.api_key_env,) if spec.api_key_env else ()
    return next((name for name in names if env.get(name, "").strip()), None)


def credential_source(spec: ProviderSpec, env: Mapping[str, str] | None = None) -> str | None:
    """Where `spec`'s credentials come from, in precedence order, for a person (never the
    secret): an environment variable, the stored credentials, for Bedrock the AWS default
    chain, for a keyless OpenAI-compatible server nothing needed; None when nowhere."""
    variable = environment_source(spec, env)
    if variable:
        return f"environment variable {variable}"
    stored = stored_credential(spec.name, env)
    if stored is not None:
        return f"stored credentials ({stored.describe()})"
    if spec.kind == "bedrock":
        profile = f"profile {spec.profile!r}" if spec.profile else "the default profile"
        return f"AWS default chain ({profile}, SSO, instance role)"
    if spec.kind == "scripted" or (spec.kind == "openai" and not spec.api_key_env):
        return "none needed"
    return None


# --- changing it --------------------------------------------------------------------------


def _render(entries: Mapping[str, StoredCredential]) -> str:
    lines = [HEADER]
    for name in sorted(entries):
        entry = entries[name]
        # json.dumps writes a valid TOML basic string (ASCII, TOML's own escapes).
        lines.append(f"\n[{json.dumps(name)}]\n")
        if entry.api_key is not None:
            lines.append(f"api_key = {json.dumps(entry.api_key.reveal())}\n")
        if entry.bearer_token is not None:
            lines.append(f"bearer_token = {json.dumps(entry.bearer_token.reveal())}\n")
        if entry.profile:
            lines.append(f"profile = {json.dumps(entry.profile)}\n")
        if entry.region:
            lines.append(f"region = {json.dumps(entry.region)}\n")
    return "".join(lines)


def _entries_to_change(path: Path) -> dict[str, StoredCredential]:
    """The entries a change starts from: a file refused for its mode still gives them (the
    change writes it 0600 again)."""
    try:
        return read_credentials(path)
    except CredentialsRefused:
        return _parse(path, path.read_text(encoding="utf-8"))


def save_credential(path: Path, entry: StoredCredential) -> None:
    """Store `entry`, replacing the provider's earlier one. A file refused for its mode keeps
    its other entries and is written 0600 again; one that cannot be parsed raises
    `CredentialsError` (nothing is lost)."""
    entries = _entries_to_change(path)
    entries[entry.provider] = entry
    write_private(path, _render(entries))


def remove_credentials(path: Path, provider: str | None = None) -> list[str]:
    """Remove `provider`'s entry (every entry when None); the names removed. The file goes
    when nothing is left in it."""
    entries = _entries_to_change(path)
    removed = sorted(entries) if provider is None else [p for p in entries if p == provider]
    for name in removed:
        del entries[name]
    if removed or (provider is None and path.exists()):
        if entries:
            write_private(path, _render(entries))
        else:
            path.unlink(missing_ok=True)
    return removed
