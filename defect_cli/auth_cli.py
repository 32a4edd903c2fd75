"""`defect login`, `defect logout` and `defect auth status`: a person's credentials, by hand.

Owns the three commands' arguments (`add_parsers`) and what they do (`run`):

- `defect login` in a terminal asks which provider (Anthropic, Bedrock, each
  `[providers.NAME]` of the user's configuration that takes a key), then the secret without
  echo (`getpass`), checks it with the provider (`providers/verify.py`) and only then stores
  it (`config/credentials.py`). This is the command an ACP client runs for terminal auth
  (`defect_acp/auth.py`). Without a terminal: `--provider NAME --api-key-stdin`,
  `--provider bedrock --profile NAME --region R` or `--bearer-token-stdin`.
- `defect logout [--provider NAME]` removes what is stored (everything without a name).
- `defect auth status` says, per provider, where its credentials come from: an environment
  variable, the stored credentials, the AWS chain or a profile, or nowhere.

Invariants:
- A secret is never printed, echoed or logged: it is read with `getpass` or from stdin, and
  shown at most as its last 4 characters. A refused key or an unreachable provider is one
  line on stderr, exit 1, and nothing is stored.
- The check goes where the provider would send the credential: the user's configuration and
  the environment only (`load_settings(None)`), never a project's file.
- Cheap to import: `build_parser` of `defect acp` adds these parsers, so everything past
  `argparse` is imported inside `run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from defect_core.config import ProviderSpec, Settings
    from defect_core.config.credentials import StoredCredential

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = ("login", "logout", "auth")
KEY_KINDS = ("anthropic", "openai")
"""The kinds of provider that take an API key; Bedrock takes a profile or a bearer token."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    login = sub.add_parser(
        "login",
        help="store a provider's credentials (checked with the provider first)",
        description="Log in to a model provider: in a terminal, defect asks which one and the "
        "key (not echoed); it checks the key with the provider, then stores it in "
        "~/.config/defect/credentials.toml (mode 0600). Environment variables still win.",
    )
    login.add_argument("--provider", help="anthropic, bedrock, or a [providers.NAME]")
    login.add_argument("--api-key-stdin", action="store_true", help="read the API key from stdin")
    login.add_argument(
        "--bearer-token-stdin",
        action="store_true",
        help="Bedrock: read a bearer token (AWS_BEARER_TOKEN_BEDROCK) from stdin",
    )
    login.add_argument("--profile", help="Bedrock: the AWS profile to use (SSO included)")
    login.add_argument("--region", help="Bedrock: the AWS region")
    logout = sub.add_parser("logout", help="remove stored credentials (all, or one provider's)")
    logout.add_argument("--provider", help="only this provider's")
    auth = sub.add_parser("auth", help="where each provider's credentials come from")
    auth_sub = auth.add_subparsers(dest="auth_command", metavar="COMMAND", required=True)
    auth_sub.add_parser("status", help="per provider: environment, stored, AWS chain or none")


class _Stop(Exception):
    """One line for the person, and the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def run(args: argparse.Namespace) -> int:
    from defect_core import log

    log.configure(level="error", fmt="human")
    try:
        settings = _settings()
        if args.command == "login":
            return _login(args, settings)
        if args.command == "logout":
            return _logout(args.provider, settings)
        return _status(settings)
    except _Stop as stop:
        sys.stderr.write(f"defect {args.command}: {stop}\n")
        return stop.status
    except KeyboardInterrupt:
        sys.stderr.write(f"\ndefect {args.command}: interrupted; nothing was saved\n")
        return 130


def _settings() -> Settings:
    from defect_core.config import ConfigError, load_settings

    try:
        return load_settings(None)  # the user's file: a project never chooses where keys go
    except ConfigError as exc:
        raise _Stop(str(exc), 2) from None


def _choices(settings: Settings) -> dict[str, ProviderSpec]:
    """The providers a person may log in to, in the order they are offered."""
    from defect_core.config import provider_spec

    specs: dict[str, ProviderSpec] = {}
    for name in ("anthropic", "bedrock", *settings.providers):
        spec = provider_spec(settings, name)
        if spec is not None and spec.kind in (*KEY_KINDS, "bedrock"):
            specs[name] = spec
    return specs


def _spec(settings: Settings, name: str) -> ProviderSpec:
    choices = _choices(settings)
    if name not in choices:
        raise _Stop(f"no provider {name!r} takes a login; choose one of {', '.join(choices)}", 2)
    return choices[name]


# --- login --------------------------------------------------------------------------------


def _login(args: argparse.Namespace, settings: Settings) -> int:
    scripted = args.api_key_stdin or args.bearer_token_stdin or args.profile
    if scripted:
        spec = _spec(settings, args.provider or ("bedrock" if args.profile else "anthropic"))
        entry = _from_flags(args, spec)
    else:
        if not (os.isatty(0) and os.isatty(2)):
            raise _Stop(
                "not a terminal: pass --provider NAME --api-key-stdin (or, for Bedrock, "
                "--profile NAME --region R or --bearer-token-stdin)",
                2,
            )
        spec = _spec(settings, args.provider) if args.provider else _ask_provider(settings)
        entry = _ask_credential(spec, args.region)
    _say(f"Checking the credentials with {spec.name}…")
    where = _verify(spec, settings, entry)
    from defect_core.config.credentials import credentials_file, save_credential

    path = credentials_file()
    try:
        save_credential(path, entry)
    except OSError as exc:
        raise _Stop(f"{exc}; nothing was saved") from None
    _say(f"Logged in to {spec.name} ({where}): {entry.describe()}, stored in {path}")
    _warn_shadowed(spec)
    return 0


def _from_flags(args: argparse.Namespace, spec: ProviderSpec) -> StoredCredential:
    from defect_core.config.credentials import Secret, StoredCredential

    if spec.kind == "bedrock":
        if args.api_key_stdin:
            raise _Stop("Bedrock takes --profile NAME or --bearer-token-stdin, not an API key", 2)
        if args.bearer_token_stdin:
            token = _read_stdin("bearer token")
            return StoredCredential(spec.name, bearer_token=Secret(token), region=args.region)
        return StoredCredential(spec.name, profile=args.profile, region=args.region)
    if not args.api_key_stdin or args.profile or args.bearer_token_stdin:
        raise _Stop(f"{spec.name} takes an API key: pass --api-key-stdin", 2)
    return StoredCredential(spec.name, api_key=Secret(_read_stdin("API key")))


def _read_stdin(what: str) -> str:
    value = sys.stdin.read().strip()
    if not value:
        raise _Stop(f"no {what} on stdin; nothing was saved", 2)
    if "\n" in value:
        raise _Stop(f"the {what} on stdin is more than one line; nothing was saved", 2)
    return value


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _ask(prompt: str, default: str = "") -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        raise KeyboardInterrupt
    return answer.strip() or default


def _ask_secret(prompt: str) -> str:
    import getpass

    value = getpass.getpass(prompt, stream=sys.stderr).strip()
    if not value:
        raise _Stop("nothing was entered; nothing was saved")
    return value


def _ask_provider(settings: Settings) -> ProviderSpec:
    choices = list(_choices(settings).values())
    _say("Log in to a model provider for defect:")
    for number, spec in enumerate(choices, 1):
        _say(f"  {number}) {spec.name:<12} {_label(spec)}")
    answer = _ask(f"Provider [1-{len(choices)}, default 1]: ", "1")
    for number, spec in enumerate(choices, 1):
        if answer in (str(number), spec.name):
            return spec
    raise _Stop(f"no provider {answer!r}; nothing was saved", 2)


def _label(spec: ProviderSpec) -> str:
    if spec.kind == "anthropic":
        return "Anthropic API key" + (f" ({spec.base_url})" if spec.base_url else "")
    if spec.kind == "bedrock":
        return "AWS Bedrock: an AWS profile (SSO included) or a bearer token, and a region"
    return f"OpenAI-compatible API key ({spec.base_url or 'api.openai.com'})"


def _ask_credential(spec: ProviderSpec, region: str | None) -> StoredCredential:
    from defect_core.config.credentials import Secret, StoredCredential

    if spec.kind != "bedrock":
        key = _ask_secret(f"API key for {spec.name} (not shown): ")
        return StoredCredential(spec.name, api_key=Secret(key))
    how = _ask("Use 1) an AWS profile or 2) a Bedrock bearer token? [1]: ", "1")
    region = region or _ask("AWS region (empty: the profile's or AWS_REGION): ") or None
    if how in ("2", "token", "bearer"):
        token = _ask_secret("Bedrock bearer token (not shown): ")
        return StoredCredential(spec.name, bearer_token=Secret(token), region=region)
    profile = _ask("AWS profile name [default]: ", "default")
    return StoredCredential(spec.name, profile=profile, region=region)


def _verify(spec: ProviderSpec, settings: Settings, entry: StoredCredential) -> str:
    from defect_core.providers.verify import VerificationFailed, verify_credential

    try:
        return verify_credential(
            spec,
            settings,
            api_key=entry.api_key.reveal() if entry.api_key else None,
            bearer_token=entry.bearer_token.reveal() if entry.bearer_token else None,
            profile=entry.profile,
            region=entry.region,
        )
    except VerificationFailed as failed:
        raise _Stop(f"{failed}; nothing was saved") from None


def _warn_shadowed(spec: ProviderSpec) -> None:
    """The environment beats what is stored: say so when it would."""
    from defect_core.config.credentials import environment_source

    variable = environment_source(spec)
    if variable:
        _say(f"note: {variable} is set in this environment and is used before the stored one")


# --- logout and status --------------------------------------------------------------------


def _logout(provider: str | None, settings: Settings) -> int:
    from defect_core.config.credentials import (
        CredentialsError,
        credentials_file,
        environment_source,
        remove_credentials,
    )

    path = credentials_file()
    try:
        removed = remove_credentials(path, provider)
    except CredentialsError as exc:
        raise _Stop(str(exc)) from None
    if not removed:
        _say(f"nothing stored{f' for {provider}' if provider else ''} in {path}")
        return 0
    _say(f"removed the stored credentials of {', '.join(removed)} from {path}")
    choices = _choices(settings)
    for name in removed:
        spec = choices.get(name)
        variable = environment_source(spec) if spec is not None else None
        if variable:
            _say(f"note: {variable} is still set in this environment; {name} keeps using it")
    return 0


def _status(settings: Settings) -> int:
    from defect_core.config.credentials import credential_source, credentials_file, stored_problem

    lines = []
    for name, spec in _choices(settings).items():
        source = credential_source(spec)
        if source is None:
            source = f"none: run `defect login --provider {name}` or set {spec.api_key_env}"
        elif source == "none needed":
            source = "none (no key is sent)"
        lines.append(f"{name:<12} {source}")
    problem = stored_problem()
    path = credentials_file()
    lines.append(f"credentials file: {path}" + (f" (refused: {problem})" if problem else ""))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
