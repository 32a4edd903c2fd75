"""The credentials door `defect acp` hands the bridge: `authenticate` and `logout` over the
stored credentials (`defect_acp/auth.py` says what the protocol makes of them).

Owns `StoredAuth`, built from the process's settings: `problem` (does the configured provider
have usable credentials now: the environment, then what `defect login` stored, then for
Bedrock boto3's chain) and `logout` (every stored credential removed).

Invariants:
- Read at the moment of asking, never before: building the door reads nothing (it is built
  before `initialize`), and `problem` re-reads the store, so a login made in another process
  is seen at once.
- Its answers say what is missing (for Anthropic in the words the provider would use at
  prompt time: `providers/anthropic/client.py`, `api_key`; for the others a line naming the
  variable or the AWS setting), with `defect login` as the way out; no secret is ever in
  them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from defect_core.config import Settings

__all__ = ["StoredAuth"]


class StoredAuth:
    """`defect_acp.auth.AuthDoor` over the stored credentials and the environment."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def problem(self) -> str | None:
        from defect_core.config import provider_settings, provider_spec
        from defect_core.config.credentials import (
            credential_source,
            environment_source,
            stored_credential,
        )

        spec = provider_spec(self._settings, self._settings.provider)
        if spec is None:
            return None  # a broken configuration: every session says so itself
        if spec.kind == "bedrock":
            if environment_source(spec) is not None or stored_credential(spec.name) is not None:
                return None
            import anyio  # neither: boto3's default chain decides

            return await anyio.to_thread.run_sync(_aws_chain_problem, spec.profile)
        if credential_source(spec) is not None:
            return None
        if spec.kind == "anthropic":
            from defect_core.providers.anthropic.client import api_key
            from defect_core.providers.base import CredentialsMissing

            try:
                api_key(provider_settings(self._settings, spec), spec.name)
            except CredentialsMissing as missing:
                return missing.message
            return None
        return (
            f"no API key for {spec.name}: set {spec.api_key_env} in the environment defect "
            f"runs in, or run `defect login --provider {spec.name}`"
        )

    def logout(self) -> list[str]:
        from defect_core.config.credentials import credentials_file, remove_credentials

        return remove_credentials(credentials_file())


def _aws_chain_problem(profile: str | None) -> str | None:
    """Why boto3's chain has no credentials for Bedrock, or None when it has some."""
    import boto3
    import botocore.exceptions

    try:
        credentials = boto3.Session(profile_name=profile).get_credentials()
    except botocore.exceptions.BotoCoreError as exc:
        return f"AWS credentials could not be loaded for Bedrock ({exc}); run `defect login`"
    if credentials is None:
        return (
            "no AWS credentials for Bedrock: set AWS_PROFILE or AWS_ACCESS_KEY_ID, or run "
            "`defect login --provider bedrock` (an AWS profile or a Bedrock bearer token)"
        )
    return None
