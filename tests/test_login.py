"""`defect login`, `defect logout` and `defect auth status`, as real processes.

The interactive login runs in a real pseudo-terminal (`pty.fork`: the child has it as its
controlling terminal, so `getpass` turns echo off as it would for a person) against the strict
fake API, whose `GET /v1/models` checks `x-api-key`. A wrong key is refused and nothing is
stored; a right one is stored 0600 in a 0700 directory and never appears on the terminal;
`auth status` names the source without the secret; `logout` removes it.
"""

from __future__ import annotations

import os
import pty
import select
import stat
import sys
import time
from pathlib import Path

import pytest

from defect_fakeapi import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    DEFAULT_AWS_SECRET_KEY,
    FakeProvider,
)
from tests.support.acp_harness import REPO, agent_env, run_defect

WRONG_KEY = "sk-ant-api03-this-key-is-wrong-4242"


def login_env(tmp_path: Path, fake: FakeProvider, **extra: str) -> dict[str, str]:
    """An environment with no key, the user's configuration under `tmp_path`, and the
    Anthropic endpoint at the fake."""
    extra.setdefault("ANTHROPIC_BASE_URL", fake.url)
    env = agent_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"), **extra)  # no ANTHROPIC_* kept
    env["HOME"] = str(tmp_path / "home")
    return env


def stored_file(tmp_path: Path) -> Path:
    return tmp_path / "xdg" / "defect" / "credentials.toml"


def in_terminal(
    args: list[str], env: dict[str, str], answers: list[tuple[str, str]]
) -> tuple[int, str]:
    """Run `defect ARGS` on a new pseudo-terminal; each time the screen shows the next
    prompt of `answers`, type its answer. The exit status and everything the terminal showed
    (what the program wrote and what the terminal echoed of the typing)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal and stdio
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "-m", "defect_cli", *args], env)
    screen = b""
    pending = list(answers)
    deadline = time.monotonic() + 60  # a hang fails the test instead of blocking the suite
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
            if pending and pending[0][0].encode() in screen.split(b"\x00")[-1]:
                _, answer = pending.pop(0)
                screen += b"\x00"  # later prompts are looked for after this one only
                os.write(fd, answer.encode() + b"\r")
        else:
            os.kill(pid, 9)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), screen.replace(b"\x00", b"").decode(errors="replace")


def test_a_wrong_key_is_refused_at_once_and_nothing_is_stored(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = login_env(tmp_path, fake_provider)
    status, screen = in_terminal(
        ["login"], env, [("Provider [", "1"), ("(not shown): ", WRONG_KEY)]
    )
    assert status == 1, screen
    assert "refused the key (401)" in screen and "nothing was saved" in screen
    assert WRONG_KEY not in screen  # not echoed, not repeated
    assert not stored_file(tmp_path).exists()
    assert [r.route for r in fake_provider.listings] == ["models"]  # checked once, refused


def test_a_right_key_is_stored_privately_shown_by_status_and_removed_by_logout(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = login_env(tmp_path, fake_provider)
    status, screen = in_terminal(
        ["login"], env, [("Provider [", "anthropic"), ("(not shown): ", DEFAULT_API_KEY)]
    )
    assert status == 0, screen
    assert DEFAULT_API_KEY not in screen
    assert f"API key …{DEFAULT_API_KEY[-4:]}" in screen
    path = stored_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert DEFAULT_API_KEY in path.read_text()

    shown = run_defect(["auth", "status"], env)
    assert shown.returncode == 0
    assert f"anthropic    stored credentials (API key …{DEFAULT_API_KEY[-4:]})" in shown.stdout
    assert DEFAULT_API_KEY not in shown.stdout + shown.stderr

    out = run_defect(["logout", "--provider", "anthropic"], env)
    assert out.returncode == 0 and "removed the stored credentials of anthropic" in out.stderr
    assert not path.exists()
    assert "anthropic    none: run `defect login" in run_defect(["auth", "status"], env).stdout


def test_the_environment_beats_the_stored_key(fake_provider: FakeProvider, tmp_path: Path) -> None:
    env = login_env(tmp_path, fake_provider)
    saved = run_defect(
        ["login", "--provider", "anthropic", "--api-key-stdin"], env, DEFAULT_API_KEY
    )
    assert saved.returncode == 0, saved.stderr
    env["ANTHROPIC_API_KEY"] = "sk-ant-from-the-environment-0000"
    shown = run_defect(["auth", "status"], env).stdout
    assert "anthropic    environment variable ANTHROPIC_API_KEY" in shown


def test_a_credentials_file_open_to_others_is_refused_with_the_fix(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = login_env(tmp_path, fake_provider)
    assert run_defect(["login", "--api-key-stdin"], env, DEFAULT_API_KEY).returncode == 0
    path = stored_file(tmp_path)
    os.chmod(path, 0o640)
    shown = run_defect(["auth", "status"], env).stdout
    assert "anthropic    none" in shown
    assert f"(refused: {path} is readable by others (mode 640)" in shown
    assert shown.rstrip().endswith(f"run `chmod 600 {path}`)")


def test_an_unreachable_provider_stores_nothing(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = login_env(tmp_path, fake_provider, ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    out = run_defect(["login", "--provider", "anthropic", "--api-key-stdin"], env, DEFAULT_API_KEY)
    assert out.returncode == 1
    assert out.stderr.strip().endswith("could not be reached: Connection error.; nothing was saved")
    assert DEFAULT_API_KEY not in out.stderr
    assert not stored_file(tmp_path).exists()


def test_an_openai_compatible_provider_of_the_configuration(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = login_env(tmp_path, fake_provider)
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'[providers.local]\nkind = "openai"\nbase_url = "{fake_provider.url}/v1"\n'
        'api_key_env = "LOCAL_KEY"\nmodels = ["tiny-coder"]\n'
    )
    wrong = run_defect(["login", "--provider", "local", "--api-key-stdin"], env, WRONG_KEY)
    assert wrong.returncode == 1 and "refused the key (401)" in wrong.stderr
    right = run_defect(["login", "--provider", "local", "--api-key-stdin"], env, DEFAULT_API_KEY)
    assert right.returncode == 0, right.stderr
    assert "local        stored credentials (API key" in run_defect(["auth", "status"], env).stdout
    unknown = run_defect(["login", "--provider", "nope", "--api-key-stdin"], env, DEFAULT_API_KEY)
    assert unknown.returncode == 2
    assert "no provider 'nope' takes a login; choose one of anthropic, bedrock, local" in (
        unknown.stderr
    )


def test_bedrock_with_a_profile_that_does_not_exist_stores_nothing(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = login_env(tmp_path, fake_provider, AWS_CONFIG_FILE=str(tmp_path / "aws-config"))
    out = run_defect(
        ["login", "--provider", "bedrock", "--profile", "nobody", "--region", "us-east-1"], env
    )
    assert out.returncode == 1
    assert "the AWS profile 'nobody' does not exist" in out.stderr
    assert not stored_file(tmp_path).exists()


def test_login_without_a_terminal_says_how(fake_provider: FakeProvider, tmp_path: Path) -> None:
    out = run_defect(["login"], login_env(tmp_path, fake_provider))
    assert out.returncode == 2
    assert "not a terminal: pass --provider NAME --api-key-stdin" in out.stderr


@pytest.mark.parametrize("provider", [None, "anthropic"])
def test_logout_with_nothing_stored(
    fake_provider: FakeProvider, tmp_path: Path, provider: str | None
) -> None:
    args = ["logout"] + (["--provider", provider] if provider else [])
    out = run_defect(args, login_env(tmp_path, fake_provider))
    assert out.returncode == 0 and "nothing stored" in out.stderr


# --- Bedrock: a profile (boto3 resolves it) or a bearer token, checked with ListFoundationModels


def bedrock_env(tmp_path: Path, fake: FakeProvider) -> dict[str, str]:
    """No AWS credentials in the environment; two profiles in AWS's own files: `fake` (the
    keys the fake accepts) and `wrong`; Bedrock's endpoint at the fake."""
    (tmp_path / "aws-credentials").write_text(
        f"[fake]\naws_access_key_id = {DEFAULT_AWS_ACCESS_KEY_ID}\n"
        f"aws_secret_access_key = {DEFAULT_AWS_SECRET_KEY}\n"
        "[wrong]\naws_access_key_id = AKIAIOSFODNN7WRONG00\naws_secret_access_key = nope\n"
    )
    env = login_env(
        tmp_path,
        fake,
        ANTHROPIC_BEDROCK_BASE_URL=fake.url,
        AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        env.pop(name, None)
    return env


def test_bedrock_stores_a_profile_name_the_provider_accepted(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = bedrock_env(tmp_path, fake_provider)
    login = ["login", "--provider", "bedrock", "--region", "us-east-1", "--profile"]
    wrong = run_defect([*login, "wrong"], env)
    assert wrong.returncode == 1
    assert "Bedrock (us-east-1) refused the credentials: UnrecognizedClientException" in (
        wrong.stderr
    )
    assert not stored_file(tmp_path).exists()
    right = run_defect([*login, "fake"], env)
    assert right.returncode == 0, right.stderr
    text = stored_file(tmp_path).read_text()
    assert 'profile = "fake"' in text and 'region = "us-east-1"' in text
    assert DEFAULT_AWS_SECRET_KEY not in text and DEFAULT_AWS_ACCESS_KEY_ID not in text
    assert [r.route for r in fake_provider.listings] == ["foundation_models"] * 2
    shown = run_defect(["auth", "status"], env).stdout
    assert "bedrock      stored credentials (AWS profile 'fake', region us-east-1)" in shown


def test_bedrock_bearer_token_is_checked_then_stored(tmp_path: Path) -> None:
    token = "bedrock-api-key-AbCdEf0123456789"
    with FakeProvider(bedrock_bearer_token=token) as fake:
        env = bedrock_env(tmp_path, fake)
        login = ["login", "--provider", "bedrock", "--bearer-token-stdin", "--region", "eu-west-1"]
        wrong = run_defect(login, env, "bedrock-api-key-wrong")
        assert wrong.returncode == 1 and "refused the credentials" in wrong.stderr
        right = run_defect(login, env, token)
        assert right.returncode == 0, right.stderr
        assert token not in right.stderr
        assert f"Bedrock bearer token …{token[-4:]}" in right.stderr
        assert f'bearer_token = "{token}"' in stored_file(tmp_path).read_text()


def test_bedrock_profile_chosen_in_a_terminal(fake_provider: FakeProvider, tmp_path: Path) -> None:
    env = bedrock_env(tmp_path, fake_provider)
    answers = [
        ("Provider [", "bedrock"),
        ("bearer token? [1]: ", "1"),
        ("AWS region", "us-east-1"),
        ("AWS profile name [default]: ", "fake"),
    ]
    status, screen = in_terminal(["login"], env, answers)
    assert status == 0, screen
    assert "Logged in to bedrock (Bedrock (us-east-1)): AWS profile 'fake', region us-east-1" in (
        screen
    )
    assert 'profile = "fake"' in stored_file(tmp_path).read_text()
