"""The stored credentials (`defect_core/config/credentials.py`) and their precedence.

The file is private (0600 in a 0700 directory), a looser one is refused with the one line
that says how to fix it, a secret never shows in a `repr` or a log line, the environment
beats what is stored, and a new login is seen by the next look-up without a restart.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from defect_core.config import Settings
from defect_core.config.credentials import (
    CredentialsRefused,
    Secret,
    StoredCredential,
    credentials_file,
    read_credentials,
    remove_credentials,
    save_credential,
    stored_credential,
    stored_problem,
)
from defect_core.providers.anthropic.client import api_key
from defect_core.providers.base import CredentialsMissing
from defect_core.redaction import REDACTED, redact

KEY = "sk-ant-stored-0123456789abcdef"


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return tmp_path / "xdg"


def test_a_saved_key_is_private_and_read_back(config_home: Path) -> None:
    path = credentials_file()
    assert path == config_home / "defect" / "credentials.toml"
    save_credential(path, StoredCredential("anthropic", api_key=Secret(KEY)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    entry = read_credentials(path)["anthropic"]
    assert entry.api_key is not None and entry.api_key.reveal() == KEY
    assert KEY not in repr(entry) and KEY not in str(entry.api_key)
    assert entry.describe() == "API key …cdef"
    assert [p.name for p in path.parent.iterdir()] == ["credentials.toml"]  # no temporary left


def test_a_file_open_to_others_is_refused_with_one_line(config_home: Path) -> None:
    path = credentials_file()
    save_credential(path, StoredCredential("anthropic", api_key=Secret(KEY)))
    os.chmod(path, 0o644)
    with pytest.raises(CredentialsRefused) as refused:
        read_credentials(path)
    assert str(refused.value).endswith(f"run `chmod 600 {path}`")
    assert "\n" not in str(refused.value)
    assert stored_credential("anthropic") is None
    assert "chmod 600" in stored_problem()
    with pytest.raises(CredentialsMissing) as missing:
        api_key(Settings(), "anthropic")
    assert f"chmod 600 {path}" in missing.value.message
    # A new login tightens the file again and keeps what it held.
    save_credential(path, StoredCredential("other", api_key=Secret(KEY + "2")))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = stored_credential("anthropic")
    assert stored is not None and stored.api_key == Secret(KEY)
    assert sorted(read_credentials(path)) == ["anthropic", "other"]


def test_the_environment_beats_the_stored_key(
    config_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CredentialsMissing) as missing:
        api_key(Settings(), "anthropic")
    assert "run `defect login`" in missing.value.message
    save_credential(credentials_file(), StoredCredential("anthropic", api_key=Secret(KEY)))
    assert api_key(Settings(), "anthropic") == KEY  # seen at once: no restart
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment")
    assert api_key(Settings(), "anthropic") == "sk-ant-from-the-environment"


def test_a_read_secret_is_redacted_everywhere(config_home: Path) -> None:
    plain = "plainsecretvalue42"  # no token shape: only remembering it can hide it
    save_credential(credentials_file(), StoredCredential("mine", api_key=Secret(plain)))
    assert redact(f"the server said {plain}") != f"the server said {REDACTED}"
    stored_credential("mine")
    assert redact(f"the server said {plain}") == f"the server said {REDACTED}"


def test_logout_removes_one_provider_or_all(config_home: Path) -> None:
    path = credentials_file()
    save_credential(path, StoredCredential("anthropic", api_key=Secret(KEY)))
    save_credential(
        path, StoredCredential("bedrock", bearer_token=Secret(KEY + "b"), region="us-east-1")
    )
    assert remove_credentials(path, "nothing") == []
    assert remove_credentials(path, "anthropic") == ["anthropic"]
    assert list(read_credentials(path)) == ["bedrock"]
    assert remove_credentials(path) == ["bedrock"]
    assert not path.exists()


def test_a_broken_file_is_an_error_not_a_crash(config_home: Path) -> None:
    path = credentials_file()
    path.parent.mkdir(parents=True)
    path.write_text("[anthropic]\napi_key = 3\n")
    os.chmod(path, 0o600)
    assert stored_credential("anthropic") is None
    assert "anthropic.api_key must be a non-empty string" in stored_problem()


def test_a_log_line_never_shows_a_stored_secret(config_home: Path) -> None:
    """In a real process with the log configured: an event carrying the stored key (as an
    SDK's debug line or an error message might) is written with it replaced."""
    plain = "plainsecretvalue42"
    save_credential(credentials_file(), StoredCredential("mine", api_key=Secret(plain)))
    program = (
        "import logging\n"
        "from defect_core import log\n"
        "from defect_core.config.credentials import stored_credential\n"
        "log.configure(level='info')\n"
        f"log.get_logger('t').info('before', value={plain!r})\n"
        "stored_credential('mine')\n"
        f"log.get_logger('t').info('after', value={plain!r})\n"
        f"logging.getLogger('sdk').warning('header x-api-key: %s', {plain!r})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
    )
    before, after, sdk = done.stderr.splitlines()
    assert plain in before  # not a secret this process knew of yet
    assert plain not in after and REDACTED in after
    assert plain not in sdk and REDACTED in sdk
