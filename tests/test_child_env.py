"""`defect_core/child_env.py`: what the processes defect starts inherit of its environment —
everything but the provider credentials and the secret-looking variables, unless the user's
own file passes one through — and how the settings make the policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from defect_core.child_env import DEFAULT_POLICY, PROVIDER_CREDENTIALS, EnvPolicy, is_secret_name
from defect_core.config.settings import ProviderSpec, Settings
from defect_core.hooks.runner import run_command
from defect_core.hooks.spec import HookSpec
from defect_core.tools.backends import LocalShellBackend

ENVIRON = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/ana",
    "LANG": "C.UTF-8",
    "ANTHROPIC_API_KEY": "sk-ant-test-0123456789",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEJr",
    "AWS_BEARER_TOKEN_BEDROCK": "bedrock-bearer-value",
    "GITHUB_TOKEN": "ghp_0123456789abcdef",
    "FOO_TOKEN": "foo-token-value",
    "MY_LLM_KEY": "custom-provider-key",
    "WORK_KEY_ENV": "the-work-providers-key",
    "PGPASSWORD": "hunter22",
    "SSH_AUTH_SOCK": "/run/user/1000/ssh-agent",
    "GIT_ASKPASS": "/usr/lib/git-core/git-gui--askpass",
    "PYTHONHASHSEED": "0",
}


@pytest.mark.parametrize(
    "name",
    [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "gh_token",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_BEARER_TOKEN_BEDROCK",
        "CLIENT_SECRET",
        "DB_PASSWORD",
        "PGPASSWORD",
        "MYSQL_PWD_PASSWORD_FILE",
        "SIGNING_PRIVATE_KEY",
        "TOKEN",
        "STRIPE_SECRET_KEY",
    ],
)
def test_names_that_mark_a_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "HOME",
        "SSH_AUTH_SOCK",
        "GIT_ASKPASS",
        "KEYBOARD_LAYOUT",
        "MONKEY",
        "TOKENIZERS_PARALLELISM",
        "PYTHONHASHSEED",
        "XDG_SESSION_TYPE",
    ],
)
def test_names_that_do_not(name: str) -> None:
    assert not is_secret_name(name)


def test_the_default_policy_keeps_everything_but_the_secrets() -> None:
    env = DEFAULT_POLICY.apply(ENVIRON)
    assert set(env) == {
        "PATH",
        "HOME",
        "LANG",
        "WORK_KEY_ENV",
        "SSH_AUTH_SOCK",
        "GIT_ASKPASS",
        "PYTHONHASHSEED",
    }
    assert env["PATH"] == ENVIRON["PATH"]
    assert DEFAULT_POLICY.withheld(ENVIRON) == sorted(set(ENVIRON) - set(env))


def test_what_the_caller_names_is_laid_over_and_kept() -> None:
    env = DEFAULT_POLICY.apply(ENVIRON, {"SERVER_TOKEN": "explicit", "PAGER": "cat"})
    assert env["SERVER_TOKEN"] == "explicit"
    assert env["PAGER"] == "cat"
    assert "GITHUB_TOKEN" not in env


def test_the_settings_add_their_credentials_and_the_users_pass_list() -> None:
    settings = Settings(
        api_key_env="MY_LLM_KEY",
        providers={
            "work": ProviderSpec(
                name="work", kind="anthropic", source="test", api_key_env="WORK_KEY_ENV"
            )
        },
        command_env_pass=("GITHUB_TOKEN", "ANTHROPIC_API_KEY"),
    )
    policy = settings.env_policy()
    env = policy.apply(ENVIRON)
    assert "WORK_KEY_ENV" not in env, "a provider's api_key_env is a credential"
    assert "MY_LLM_KEY" not in env
    assert env["GITHUB_TOKEN"] == ENVIRON["GITHUB_TOKEN"], "passed through by the user"
    assert env["ANTHROPIC_API_KEY"] == ENVIRON["ANTHROPIC_API_KEY"], "the user's own choice"
    assert "FOO_TOKEN" not in env


def test_secret_values_are_the_values_of_every_secret_variable() -> None:
    policy = Settings(command_env_pass=("GITHUB_TOKEN",)).env_policy()
    values = set(policy.secret_values(ENVIRON))
    assert ENVIRON["GITHUB_TOKEN"] in values, "passed through, still not to be shown"
    assert ENVIRON["ANTHROPIC_API_KEY"] in values
    assert ENVIRON["PGPASSWORD"] in values
    assert ENVIRON["PATH"] not in values


def test_the_provider_credentials_are_withheld_whatever_their_names() -> None:
    for name in PROVIDER_CREDENTIALS:
        assert EnvPolicy().withholds(name)


# --- the processes that apply it -------------------------------------------------------------


@pytest.fixture
def secrets_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENVIRON["ANTHROPIC_API_KEY"])
    monkeypatch.setenv("FOO_TOKEN", ENVIRON["FOO_TOKEN"])
    monkeypatch.setenv("GITHUB_TOKEN", ENVIRON["GITHUB_TOKEN"])


async def _local_env(policy: EnvPolicy) -> str:
    shell = LocalShellBackend()
    handle = await shell.create("env", Path.cwd(), env={"PAGER": "cat"}, policy=policy)
    try:
        await shell.wait_for_exit(handle)
        return (await shell.output(handle)).output
    finally:
        await shell.release(handle)


@pytest.mark.anyio
@pytest.mark.usefixtures("secrets_set")
async def test_a_local_command_runs_without_the_secrets() -> None:
    printed = await _local_env(DEFAULT_POLICY)
    assert "PAGER=cat" in printed and "PATH=" in printed
    for name in ("ANTHROPIC_API_KEY", "FOO_TOKEN", "GITHUB_TOKEN"):
        assert ENVIRON[name] not in printed
    passed = await _local_env(Settings(command_env_pass=("GITHUB_TOKEN",)).env_policy())
    assert f"GITHUB_TOKEN={ENVIRON['GITHUB_TOKEN']}" in passed
    assert ENVIRON["FOO_TOKEN"] not in passed


@pytest.mark.anyio
@pytest.mark.usefixtures("secrets_set")
async def test_a_hook_runs_without_the_secrets(tmp_path: Path) -> None:
    spec = HookSpec(event="user_prompt", command="env")
    outcome = await run_command(spec, {"event": "user_prompt"}, tmp_path, "s1")
    assert outcome is not None
    assert f"DEFECT_PROJECT_DIR={tmp_path}" in outcome.context
    for name in ("ANTHROPIC_API_KEY", "FOO_TOKEN", "GITHUB_TOKEN"):
        assert ENVIRON[name] not in outcome.context
