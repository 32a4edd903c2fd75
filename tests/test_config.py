"""Layered configuration: defaults < user file < repo file < repo local file < env < CLI.

Pins down the order of the layers, that tables merge key by key, and that a bad file fails at
start naming the file and the key (unknown keys, wrong types, secrets written as values).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from defect_core.config import ConfigError, Settings, load_settings, settings_from_env
from tests.support.config_files import user_file, write


def test_without_files_env_or_flags_the_built_in_defaults_apply(home: Path, repo: Path) -> None:
    settings = load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    assert settings == Settings()
    assert settings.sources == ()


def test_each_layer_overrides_the_one_below(home: Path, repo: Path) -> None:
    user = user_file(
        home,
        'provider = "bedrock"\nmodel = "user-model"\nmax_tokens = 1000\nretries = 1\n'
        "max_turn_requests = 7\nread_timeout = 5\n",
    )
    shared = write(
        repo / ".defect" / "config.toml",
        'model = "repo-model"\nmax_tokens = 2000\nretries = 2\nmax_turn_requests = 8\n',
    )
    local = write(repo / ".defect" / "config.local.toml", "max_tokens = 3000\nretries = 3\n")
    env = {"HOME": str(home), "DEFECT_RETRIES": "5", "DEFECT_MAX_TOKENS": "4000"}

    settings = load_settings(
        repo / "src" / "pkg", env=env, cli={"max_tokens": 5000}, trust_project=True
    )

    assert settings.provider == "bedrock"  # user file only
    assert settings.read_timeout == 5.0  # user file only, int accepted for a float
    assert settings.model == "repo-model"  # repo over user
    assert settings.max_turn_requests == 8  # repo over user
    assert settings.retries == 5  # env over local
    assert settings.max_tokens == 5000  # CLI over env
    assert settings.sources == (str(user), str(shared), str(local))


def test_xdg_config_home_replaces_dot_config(tmp_path: Path, home: Path) -> None:
    user_file(home, 'model = "from-home"\n')
    xdg = write(tmp_path / "xdg" / "defect" / "config.toml", 'model = "from-xdg"\n')
    settings = load_settings(None, env={"HOME": str(home), "XDG_CONFIG_HOME": str(xdg.parents[1])})
    assert settings.model == "from-xdg"


def test_provider_tables_and_model_lists_merge_key_by_key(home: Path, repo: Path) -> None:
    user_file(
        home,
        '[anthropic]\napi_key_env = "MY_CLAUDE_KEY"\n'
        '[bedrock]\nregion = "eu-west-1"\nprofile = "work"\n'
        '[models]\nanthropic = ["claude-a", "claude-b"]\n',
    )
    write(
        repo / ".defect" / "config.toml",
        '[bedrock]\nregion = "us-west-2"\nbase_url = "https://bedrock.example.com/"\n'
        '[models]\nbedrock = ["us.anthropic.x-v1:0"]\n',
    )
    settings = load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    assert settings.api_key_env == "MY_CLAUDE_KEY"
    assert settings.aws_profile == "work"
    assert settings.aws_region == "us-west-2"
    assert settings.bedrock_base_url == "https://bedrock.example.com"
    assert settings.models == {
        "anthropic": ("claude-a", "claude-b"),
        "bedrock": ("us.anthropic.x-v1:0",),
    }
    assert settings.models_for("anthropic") == ("claude-a", "claude-b")


def test_context_windows_are_a_table_of_token_counts(home: Path, repo: Path) -> None:
    user_file(home, '[context_windows]\n"claude-a" = 200000\n"claude-b" = 100000\n')
    write(repo / ".defect" / "config.toml", '[context_windows]\n"claude-b" = 1000000\n')
    settings = load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    assert settings.context_windows == {"claude-a": 200_000, "claude-b": 1_000_000}
    write(repo / ".defect" / "config.local.toml", '[context_windows]\n"claude-c" = "big"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    assert info.value.key == "context_windows.claude-c"


def test_mcp_servers_are_read_merged_by_name_and_expand_env_references(
    home: Path, repo: Path
) -> None:
    user_file(
        home,
        '[mcp.servers.docs]\ncommand = "docs-server"\nargs = ["--stdio"]\n'
        'env = { TOKEN = "${DOCS_TOKEN}" }\n'
        '[mcp.servers.search]\ntype = "http"\nurl = "https://user.example/mcp"\n',
    )
    write(
        repo / ".defect" / "config.toml",
        '[mcp.servers.search]\ntype = "sse"\nurl = "https://repo.example/sse"\n',
    )
    settings = load_settings(repo, env={"HOME": str(home), "DOCS_TOKEN": "t0k"}, trust_project=True)
    by_name = {spec.name: spec for spec in settings.mcp_servers}
    assert set(by_name) == {"docs", "search"}
    assert by_name["docs"].command == "docs-server" and by_name["docs"].args == ("--stdio",)
    assert by_name["docs"].env == (("TOKEN", "t0k"),)
    assert (by_name["search"].transport, by_name["search"].url) == (
        "sse",
        "https://repo.example/sse",
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[mcp.servers.x]\ncommand = "c"\ncwd = "/tmp"\n', "mcp.servers.x.cwd"),
        ('[mcp.servers.x]\nargs = ["a"]\n', "mcp.servers.x"),
        ('[mcp.clients.x]\ncommand = "c"\n', "mcp.clients"),
    ],
)
def test_bad_mcp_entries_fail_at_start(home: Path, text: str, key: str) -> None:
    user_file(home, text)
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"HOME": str(home)})
    assert info.value.key == key


def test_environment_sets_urls_region_and_profile(home: Path, repo: Path) -> None:
    write(repo / ".defect" / "config.toml", '[bedrock]\nregion = "eu-west-1"\n')
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9999",
        "ANTHROPIC_BEDROCK_BASE_URL": "http://127.0.0.1:9998",
        "AWS_REGION": "ap-south-1",
        "AWS_PROFILE": "dev",
        "AWS_DEFAULT_REGION": "us-east-1",
        "DEFECT_PROVIDER": "anthropic",
        "DEFECT_MODEL": "claude-x",
        "DEFECT_REASONING_EFFORT": "off",
    }
    settings = load_settings(repo, env=env, trust_project=True)
    assert settings.base_url == "http://127.0.0.1:9999"
    assert settings.bedrock_base_url == "http://127.0.0.1:9998"
    assert settings.aws_region == "ap-south-1"
    assert settings.aws_profile == "dev"
    assert (settings.provider, settings.model, settings.reasoning_effort) == (
        "anthropic",
        "claude-x",
        "off",
    )


def test_aws_default_region_does_not_override_a_configured_region(home: Path, repo: Path) -> None:
    write(repo / ".defect" / "config.toml", '[bedrock]\nregion = "eu-west-1"\n')
    settings = load_settings(
        repo, env={"HOME": str(home), "AWS_DEFAULT_REGION": "us-east-1"}, trust_project=True
    )
    assert settings.aws_region == "eu-west-1"


def test_cli_flags_win_and_none_means_not_given(home: Path, repo: Path) -> None:
    write(repo / ".defect" / "config.toml", 'provider = "bedrock"\nmodel = "m1"\n')
    settings = load_settings(
        repo,
        env={"HOME": str(home), "DEFECT_MODEL": "m2"},
        cli={"provider": "anthropic", "model": None, "aws_region": "eu-north-1"},
    )
    assert settings.provider == "anthropic"
    assert settings.model == "m2"
    assert settings.aws_region == "eu-north-1"


def test_unknown_key_fails_naming_the_file_and_the_key(home: Path, repo: Path) -> None:
    path = write(repo / ".defect" / "config.toml", 'modle = "claude"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    assert str(path) in str(info.value)
    assert "modle" in str(info.value)
    assert info.value.key == "modle" and info.value.source == str(path)


def test_unknown_key_inside_a_table_is_named_with_its_table(home: Path) -> None:
    path = user_file(home, '[bedrock]\nregoin = "us-east-1"\n')
    with pytest.raises(ConfigError, match=r"bedrock\.regoin: unknown key") as info:
        load_settings(None, env={"HOME": str(home)})
    assert str(path) in str(info.value)


def test_wrong_type_fails_naming_the_file_the_key_and_the_type(home: Path, repo: Path) -> None:
    path = write(repo / ".defect" / "config.local.toml", 'max_tokens = "lots"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    message = str(info.value)
    assert str(path) in message and "max_tokens" in message and "integer" in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("retries = true\n", "retries"),
        ("read_timeout = 0\n", "read_timeout"),
        ('reasoning_effort = "extreme"\n', "reasoning_effort"),
        ('provider = "openai"\n', "provider"),
        ('[models]\nbedrock = "one-id"\n', "models.bedrock"),
        ('[models]\nvertex = ["x"]\n', "models.vertex"),
        ('anthropic = "key"\n', "anthropic"),
        ('[anthropic]\nbase_url = "api.anthropic.com"\n', "anthropic.base_url"),
    ],
)
def test_bad_values_fail_at_start(home: Path, text: str, key: str) -> None:
    user_file(home, text)
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"HOME": str(home)})
    assert info.value.key == key


def test_invalid_toml_names_the_file(home: Path) -> None:
    path = user_file(home, "model = \n")
    with pytest.raises(ConfigError, match="not valid TOML") as info:
        load_settings(None, env={"HOME": str(home)})
    assert str(path) in str(info.value)


def test_a_secret_is_never_accepted_as_a_value(home: Path) -> None:
    user_file(home, '[anthropic]\napi_key = "sk-ant-api03-secret"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"HOME": str(home)})
    message = str(info.value)
    assert "anthropic.api_key" in message and "api_key_env" in message
    assert "sk-ant" not in message


def test_a_key_pasted_into_api_key_env_is_refused(home: Path) -> None:
    user_file(home, '[anthropic]\napi_key_env = "sk-ant-api03-secret"\n')
    with pytest.raises(ConfigError, match="NAME of the environment variable") as info:
        load_settings(None, env={"HOME": str(home)})
    assert info.value.key == "anthropic.api_key_env"
    assert "sk-ant" not in str(info.value)


def test_bad_environment_values_name_the_variable(home: Path) -> None:
    with pytest.raises(ConfigError, match="DEFECT_MAX_TOKENS") as info:
        load_settings(None, env={"HOME": str(home), "DEFECT_MAX_TOKENS": "many"})
    assert info.value.source == "environment"


def test_unknown_cli_flag_is_refused(home: Path) -> None:
    with pytest.raises(ConfigError, match="command line: api_key"):
        load_settings(None, env={"HOME": str(home)}, cli={"api_key": "x"})


def test_script_path_in_a_file_is_relative_to_that_file(home: Path, repo: Path) -> None:
    write(repo / ".defect" / "config.toml", 'script_path = "replies.json"\n')
    settings = load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    assert settings.script_path == str((repo / ".defect" / "replies.json").resolve())


def test_repo_files_are_found_from_a_subdirectory_but_not_above_the_repo(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    write(tmp_path / ".defect" / "config.toml", 'model = "outside"\n')
    write(repo / ".defect" / "config.toml", 'model = "inside"\n')
    assert (
        load_settings(repo / "src" / "pkg", env={"HOME": str(home)}, trust_project=True).model
        == "inside"
    )
    (repo / ".defect" / "config.toml").unlink()
    assert (
        load_settings(repo / "src" / "pkg", env={"HOME": str(home)}, trust_project=True).model
        is None
    )


def test_importing_config_loads_no_heavy_module() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import defect_core.config as c; c.Settings(); "
        "heavy = [m for m in ('pydantic', 'anyio', 'defect_core.mcp', 'anthropic') "
        "if m in sys.modules]; assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


def test_settings_from_env_keeps_its_defect_variables() -> None:
    settings = settings_from_env(
        {
            "DEFECT_PROVIDER": "anthropic",
            "DEFECT_MODEL": "claude-y",
            "DEFECT_SCRIPT": "/tmp/s.json",
            "DEFECT_MAX_TURN_REQUESTS": "3",
        }
    )
    assert (settings.provider, settings.model, settings.script_path) == (
        "anthropic",
        "claude-y",
        "/tmp/s.json",
    )
    assert settings.max_turn_requests == 3
    base = Settings(max_tokens=1234)
    assert settings_from_env({}, base=base) == base


# --- several providers ([providers.NAME]) ---------------------------------------------------


def test_provider_tables_are_providers_beside_the_implied_ones(home: Path, repo: Path) -> None:
    from defect_core.config import default_selection, provider_settings, provider_specs

    user_file(
        home,
        'provider = "work"\n\n[providers.work]\nkind = "bedrock"\nregion = "eu-central-1"\n'
        'profile = "sso"\nmodels = ["eu.anthropic.claude-sonnet-4-5-20250929-v1:0"]\n\n'
        '[providers.personal]\nkind = "anthropic"\napi_key_env = "MY_KEY"\n'
        'base_url = "http://127.0.0.1:9/"\n\n[models]\nscripted = ["offline"]\n',
    )
    settings = load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    specs = provider_specs(settings)
    assert [(s.name, s.kind) for s in specs] == [
        ("work", "bedrock"),
        ("personal", "anthropic"),
        ("scripted", "scripted"),  # implied, because [models] lists it
    ]
    assert default_selection(settings, "first").provider == "work"
    personal = provider_settings(settings, specs[1])
    assert personal.provider == "anthropic" and personal.api_key_env == "MY_KEY"
    assert personal.base_url == "http://127.0.0.1:9" and personal.models == {}
    work = provider_settings(settings, specs[0])
    assert (work.aws_region, work.aws_profile) == ("eu-central-1", "sso")
    assert work.models == {"bedrock": ("eu.anthropic.claude-sonnet-4-5-20250929-v1:0",)}


def test_the_plain_keys_are_the_implied_default_provider(home: Path, repo: Path) -> None:
    from defect_core.config import provider_settings, provider_specs

    user_file(home, 'provider = "anthropic"\n[anthropic]\napi_key_env = "K"\n')
    settings = load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    (only,) = provider_specs(settings)
    assert (only.name, only.kind, only.api_key_env) == ("anthropic", "anthropic", "K")
    built = provider_settings(settings, only)
    assert built.provider_origin == settings.provider_origin  # messages name the user file


def test_a_later_layer_replaces_a_provider_table_whole(home: Path, repo: Path) -> None:
    user_file(home, '[providers.gw]\nkind = "anthropic"\napi_key_env = "A"\n')
    write(repo / ".defect" / "config.toml", '[providers.gw]\nkind = "scripted"\n')
    settings = load_settings(repo, env={"HOME": str(home)}, trust_project=True)
    assert settings.providers["gw"].kind == "scripted"
    assert settings.providers["gw"].api_key_env == "ANTHROPIC_API_KEY"


@pytest.mark.parametrize(
    ("text", "key", "line", "words"),
    [
        ('[providers.x]\nregion = "a"\n', "providers.x", 1, "`kind` is required"),
        ('[providers.x]\nkind = "mistral"\n', "providers.x.kind", 2, "must be one of"),
        (
            '[providers.x]\nkind = "bedrock"\n\napi_key_env = "K"\n',
            "providers.x.api_key_env",
            4,
            "not a setting of a bedrock provider",
        ),
        (
            '[providers.x]\nkind = "anthropic"\napi_key = "sk"\n',
            "providers.x.api_key",
            3,
            "secrets",
        ),
        ('[providers.x]\nkind = "anthropic"\nmodels = []\n', "providers.x.models", 3, "at least"),
        ('[providers."a/b"]\nkind = "anthropic"\n', "providers.a/b", None, "no '/'"),
        ('[providers.anthropic]\nkind = "anthropic"\n', "providers.anthropic", 1, "another name"),
        ("providers = 3\n", "providers", 1, "[providers.NAME]"),
        ('provider = "nowhere"\n', "provider", 1, "no provider is called 'nowhere'"),
    ],
)
def test_bad_provider_tables_name_the_file_line_and_key(
    home: Path, text: str, key: str, line: int | None, words: str
) -> None:
    path = user_file(home, text)
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"HOME": str(home)})
    assert info.value.key == key
    assert info.value.source == str(path)
    if line is not None:
        assert info.value.line == line
    assert words in str(info.value)


def test_provider_may_name_a_table_of_another_layer(home: Path, repo: Path) -> None:
    user_file(home, '[providers.team]\nkind = "scripted"\n')
    write(repo / ".defect" / "config.toml", 'provider = "team"\n')
    assert load_settings(repo, env={"HOME": str(home)}, trust_project=True).provider == "team"
    env = {"HOME": str(home), "DEFECT_PROVIDER": "elsewhere"}
    with pytest.raises(ConfigError) as info:
        load_settings(repo, env=env, trust_project=True)
    assert info.value.source == "DEFECT_PROVIDER" and "team" in str(info.value)


def test_a_provider_table_may_carry_its_own_hosted_search(home: Path) -> None:
    from defect_core.config import web_search_for

    user_file(
        home,
        '[capabilities.web_search]\nmode = "delegate"\n\n[providers.gw]\nkind = "bedrock"\n\n'
        '[providers.gw.capabilities.web_search]\nmode = "disabled"\n',
    )
    settings = load_settings(None, env={"HOME": str(home)})
    assert web_search_for(settings.capabilities, "gw").mode == "disabled"
    assert web_search_for(settings.capabilities, "anthropic").mode == "delegate"
    user_file(
        home, '[providers.gw]\nkind = "bedrock"\n[providers.gw.capabilities.web_search]\nx = 1\n'
    )
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"HOME": str(home)})
    assert info.value.key == "providers.gw.capabilities.web_search.x" and info.value.line == 4


def test_the_user_file_passes_named_variables_to_commands(home: Path, repo: Path) -> None:
    user_file(home, '[command_environment]\npass = ["GITHUB_TOKEN", "NPM_TOKEN", "GITHUB_TOKEN"]\n')
    settings = load_settings(repo, env={"HOME": str(home)})
    assert settings.command_env_pass == ("GITHUB_TOKEN", "NPM_TOKEN")
    policy = settings.env_policy()
    assert not policy.withholds("GITHUB_TOKEN") and policy.withholds("FOO_TOKEN")


@pytest.mark.parametrize("name", ["config.toml", "config.local.toml"])
def test_a_project_file_cannot_pass_secrets_to_commands(home: Path, repo: Path, name: str) -> None:
    path = write(
        repo / ".defect" / name, '\n\n[command_environment]\npass = ["AWS_SECRET_ACCESS_KEY"]\n'
    )
    with pytest.raises(ConfigError, match="only your user configuration") as info:
        load_settings(repo, env={"HOME": str(home)})
    assert info.value.source == str(path) and info.value.line == 3


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[command_environment]\npass = "GITHUB_TOKEN"\n', "must be a list"),
        ('[command_environment]\npass = ["GITHUB TOKEN"]\n', "not an environment variable name"),
        ('[command_environment]\ndrop = ["X"]\n', "unknown key"),
    ],
)
def test_bad_pass_lists_name_the_file_and_the_line(home: Path, text: str, problem: str) -> None:
    path = user_file(home, text)
    with pytest.raises(ConfigError, match=problem) as info:
        load_settings(None, env={"HOME": str(home)})
    assert info.value.source == str(path) and info.value.line == 2


def test_steering_interrupt_tools_is_a_preference_a_project_may_set(home: Path, repo: Path) -> None:
    env = {"HOME": str(home)}
    assert load_settings(repo, env=env, trust_project=False).steering_interrupt_tools is False
    user_file(home, "[steering]\ninterrupt_tools = true\n")
    assert load_settings(repo, env=env, trust_project=False).steering_interrupt_tools is True
    write(repo / ".defect" / "config.toml", "[steering]\ninterrupt_tools = false\n")
    untrusted = load_settings(repo, env=env, trust_project=False)
    assert untrusted.steering_interrupt_tools is False  # applied untrusted: a preference
    bad = write(repo / ".defect" / "config.local.toml", '[steering]\ninterrupt_tools = "yes"\n')
    with pytest.raises(ConfigError) as error:
        load_settings(repo, env=env, trust_project=True)
    assert str(bad) in str(error.value) and "interrupt_tools" in str(error.value)
