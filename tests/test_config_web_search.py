"""The hosted web search keys of the configuration: tables, scopes, layers and refusals.

Owns the evidence that `[capabilities.web_search]` and `[<provider>.capabilities.web_search]`
resolve as `defect_core/config/capabilities.py` says: disabled by default, a provider's keys
over the global ones, a later layer over an earlier one key by key, a domain list replacing the
other one, and a clear `ConfigError` (file, line, key) for what the API would refuse.
Real TOML files in a temporary directory, read by `load_settings`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from defect_core.config import ConfigError, WebSearchSettings, load_settings, web_search_for


def settings_from(
    tmp_path: Path, user: str = "", project: str = ""
) -> dict[str, WebSearchSettings]:
    home = tmp_path / "home"
    (home / "defect").mkdir(parents=True)
    (home / "defect" / "config.toml").write_text(user)
    work = tmp_path / "work"
    (work / ".defect").mkdir(parents=True)
    (work / ".defect" / "config.toml").write_text(project)
    settings = load_settings(work, env={"XDG_CONFIG_HOME": str(home)}, trust_project=True)
    return {
        p: web_search_for(settings.capabilities, p) for p in ("anthropic", "bedrock", "scripted")
    }


def test_disabled_by_default(tmp_path: Path) -> None:
    assert set(settings_from(tmp_path).values()) == {WebSearchSettings()}


def test_a_provider_overrides_the_global_table_key_by_key(tmp_path: Path) -> None:
    resolved = settings_from(
        tmp_path,
        user='[capabilities.web_search]\nmode = "delegate"\nmax_uses = 3\n',
        project='[bedrock.capabilities.web_search]\nmode = "disabled"\n'
        '[scripted.capabilities.web_search]\nmode = "disabled"\n',
    )
    assert resolved["anthropic"] == WebSearchSettings(mode="delegate", max_uses=3)
    assert resolved["bedrock"] == WebSearchSettings(mode="disabled", max_uses=3)
    assert resolved["scripted"].mode == "disabled"


def test_a_domain_list_replaces_the_other_one(tmp_path: Path) -> None:
    resolved = settings_from(
        tmp_path,
        user='[capabilities.web_search]\nmode = "delegate"\nblocked_domains = ["b.org"]\n',
        project='[anthropic.capabilities.web_search]\nallowed_domains = ["a.org"]\n',
    )
    assert resolved["anthropic"].allowed_domains == ("a.org",)
    assert resolved["anthropic"].blocked_domains is None
    assert resolved["bedrock"].blocked_domains == ("b.org",)


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        (
            '[capabilities.web_search]\nallowed_domains = ["a"]\nblocked_domains = ["b"]\n',
            "line 3: capabilities.web_search.blocked_domains",
            "cannot both be set",
        ),
        (
            "[capabilities.web_search]\nblocked_domains = []\n",
            "line 2: capabilities.web_search.blocked_domains",
            "at least one domain",
        ),
        ('[capabilities.web_search]\nmode = "on"\n', "capabilities.web_search.mode", "delegate or"),
        ("[capabilities.web_search]\nmax_uses = 0\n", "web_search.max_uses", "at least 1"),
        ("[capabilities.web_fetch]\nmode = 1\n", "capabilities.web_fetch", "unknown key"),
        ("[anthropic.capabilities.web_search]\nquery = 1\n", "web_search.query", "unknown key"),
        ("[scripted]\nmodel = 1\n", "scripted.model", "unknown key"),
    ],
)
def test_refusals_name_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from(tmp_path, project=text)
    assert key in str(err.value) and problem in str(err.value)
    assert "config.toml" in str(err.value)
