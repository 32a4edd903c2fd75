"""Project trust: which of a project's own settings take effect, and why the others do not.

A repository is untrusted input: cloning one and opening it in an editor is not consent to run
its commands, send the user's credentials where it says, or widen what the agent may do. This
module owns that decision for one project, as one mechanism for everything a project can set:

- what a project's files would change that needs trust (`Gated`, `gated_items` for a
  `.defect/config*.toml`, `mcp_json_items` for `.mcp.json`), each shown as the user would
  read it — the full command line of a server, the host a request goes to, the variable a key
  is read from — and digested (sha256) for the trust file;
- whether the project is trusted (`decide`): by `--trust-project` (`defect exec`), by a `/trust`
  decision whose digests cover every gated item now (`trust_store.py`), or wholesale by the
  user's `trusted_projects`; a project whose gated items are not all covered by its `/trust`
  decision is untrusted again (`changed`), and the notice says what is new;
- the filtering of each project layer by the key table's trust column (`keys.FIELD_TRUST`:
  `ProjectTrust.split`), and the rule on credentials, which holds even in a trusted project:
  a key read from the environment goes only to a host the user's own configuration (file,
  environment, flags) names for it or the provider's default host, unless the user confirmed
  that host by `/trust` (where the question shows it) or `--trust-project`; and `api_key_env`
  may only name a variable the user's configuration or the default names.

Invariants:
- Nothing a project sets is withheld silently: every setting not applied is listed in
  `ProjectTrust.notice` (shown once when a session opens, and logged), with how to trust; what
  was withheld is recorded by `finish` once every project layer is split.
- A project never trusts itself: `trusted_projects` and the trust file are read from the
  user's configuration directory only (a project file setting `trusted_projects` is a
  `ConfigError`, `files.py`), and every path is compared as a real path (a project reached
  through a symlink inside a trusted directory is judged where it really is).
- Pure but for reading `.mcp.json` and the trust file: the MCP entry parser is imported only
  when a project has a `.mcp.json` (docs/architecture.md, rule 6).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from defect_core.config.capabilities import CAPABILITY_SCOPES
from defect_core.config.keys import (
    FIELD_TRUST,
    PROJECT,
    SHAPED_KEYS,
    TABLE_KEYS,
    TOP_KEYS,
    TRUSTED,
    Layer,
)
from defect_core.config.settings import Settings
from defect_core.config.trust_store import read_trust
from defect_core.log import get_logger

if TYPE_CHECKING:
    from defect_core.mcp.spec import McpServerSpec

__all__ = [
    "DEFAULT_KEY_ENV",
    "Gated",
    "ProjectTrust",
    "decide",
    "finish",
    "gated_items",
    "mcp_json_items",
]

log = get_logger("defect.config")

DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
"""The documented variable of the Anthropic key: the one `api_key_env` names by default."""

_NOT_TRUSTED = "the project is not trusted"

TrustState = Literal["trusted", "untrusted", "changed"]


@dataclass(frozen=True, slots=True)
class Gated:
    """One thing a project's files would change that needs trust, as the user reads it."""

    source: str
    """The file, relative to the project root (`.defect/config.toml`, `.mcp.json`)."""
    key: str
    """The dotted key (`anthropic.base_url`, `mcp.servers.NAME`, `mcpServers.NAME`)."""
    text: str
    """What it does: the value, the full command line, the host."""

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.source}\0{self.key}\0{self.text}".encode()).hexdigest()

    @property
    def line(self) -> str:
        return f"{self.key} ({self.source}): {self.text}"


def _shown(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _server_text(entry: Mapping[str, Any]) -> str:
    """An MCP server entry as what it does, from the file's own text (`${VAR}` unexpanded: the
    user sees which variables it reads, never their values)."""
    if "command" in entry:
        argv = [str(entry["command"]), *(str(a) for a in entry.get("args") or [])]
        text = f"runs {shlex.join(argv)}"
        env = entry.get("env") or {}
        if isinstance(env, Mapping) and env:
            text += " with " + ", ".join(f"{k}={v}" for k, v in env.items())
        return text
    text = f"connects to {entry.get('url')}"
    headers = entry.get("headers") or {}
    if isinstance(headers, Mapping) and headers:
        text += " with headers " + ", ".join(f"{k}: {v}" for k, v in headers.items())
    return text


_WHAT = {
    "base_url": " (model requests, with your credentials, go to this host)",
    "api_key_env": " (the API key is read from this variable)",
    "region": " (your AWS credentials sign requests for this region)",
    "profile": " (your AWS credentials are taken from this profile)",
}
"""What a provider table's key means for the user's credentials, said where it is shown."""


def gated_items(data: Mapping[str, Any], source: str) -> list[Gated]:
    """What a project's (already validated) config file sets that needs trust."""
    items: list[Gated] = []

    def add(key: str, text: str) -> None:
        items.append(Gated(source, key, text))

    for key, value in data.items():
        if key in TOP_KEYS:
            if TOP_KEYS[key].trust != PROJECT:
                add(key, f"{key} = {_shown(value)}")
        elif key in TABLE_KEYS or key in CAPABILITY_SCOPES:
            table = TABLE_KEYS.get(key, {})
            for sub, sub_value in value.items():
                if sub == "capabilities" or table[sub].trust != PROJECT:
                    what = _WHAT.get(sub, "")
                    add(f"{key}.{sub}", f"{key}.{sub} = {_shown(sub_value)}{what}")
        elif key == "mcp":
            for name, entry in value.get("servers", {}).items():
                add(f"mcp.servers.{name}", f'MCP server "{name}" {_server_text(entry)}')
        elif key == "providers":
            for name, table in value.items():
                said = "".join(_WHAT[k] for k in ("base_url", "api_key_env") if k in table)
                add(f"providers.{name}", f"provider {name} = {_shown(table)}{said}")
        elif key == "hooks":
            for event, entries in value.items():
                for entry in entries:
                    what = entry.get("command") or f"adds the note {entry.get('prompt')!r}"
                    add(f"hooks.{event}", f"hook {event} runs {what}")
        elif key in SHAPED_KEYS and SHAPED_KEYS[key][1] != PROJECT:
            add(key, f"{key} = {_shown(value)}")
    return items


def mcp_json_items(cwd: Path, root: Path) -> tuple[list[Gated], list[McpServerSpec]]:
    """The servers of `<cwd>/.mcp.json`, read once: what each would run, and their specs
    (a file or an entry that cannot be used is logged and skipped, `mcp/spec.py`)."""
    path = cwd / ".mcp.json"
    if not path.exists() and not path.is_symlink():
        return [], []  # most projects: no import of the MCP spec module at all
    from defect_core.mcp.spec import parse_server_table, read_mcp_json

    servers = read_mcp_json(cwd)
    specs = parse_server_table(servers, source=str(path))
    try:
        source = str(path.resolve().relative_to(root))
    except ValueError:
        source = str(path)
    items = [
        Gated(source, f"mcpServers.{spec.name}", f'MCP server "{spec.name}" {_server_text(raw)}')
        for spec in specs
        if isinstance(raw := servers.get(spec.name), Mapping)
    ]
    return items, specs


@dataclass(frozen=True, slots=True)
class ProjectTrust:
    """What one project's own files set that needs trust, whether it is trusted, and what
    was not applied (and why)."""

    root: str
    """The project's real path."""
    state: TrustState
    how: str = ""
    """What trusted it: `--trust-project`, `/trust`, `trusted_projects` ("" when untrusted)."""
    items: tuple[Gated, ...] = ()
    changed: tuple[Gated, ...] = ()
    """State `changed`: the items the `/trust` decision did not cover."""
    withheld: tuple[str, ...] = ()
    """One line per setting not applied, for the notice."""
    mcp_json: tuple[McpServerSpec, ...] = ()
    """`.mcp.json`'s servers (started only when trusted)."""
    held_servers: tuple[McpServerSpec, ...] = ()
    """The project's servers not started (`.mcp.json`, `[mcp.servers]`): what `/trust` starts."""
    store: str = ""
    """The trust file (`trust_store.py`)."""
    user_file: str = ""
    """The user's `config.toml` (where `trusted_projects` is)."""

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"

    @property
    def confirmed(self) -> bool:
        """Trusted with the gated items shown (so credential hosts were confirmed)."""
        return self.how in ("/trust", "--trust-project")

    @property
    def digests(self) -> frozenset[str]:
        return frozenset(item.digest for item in self.items)

    def applied_mcp_json(self) -> tuple[McpServerSpec, ...]:
        return self.mcp_json if self.trusted else ()

    def split(self, layer: Layer, user: Settings, source: str) -> tuple[Layer, list[str]]:
        """The part of a project layer that applies, and a line for each key that does not
        (`keys.FIELD_TRUST` decides; credentials and limits are checked against `user`, the
        user's own configuration: file, environment, flags)."""
        applied: Layer = {}
        withheld: list[str] = []
        dropped: set[str] = set()

        def hold(key: str, why: str) -> None:
            withheld.append(f"{key} ({source}): {why}")

        for name, value in layer.items():
            trust = FIELD_TRUST.get(name, TRUSTED)
            key = _FIELD_KEYS.get(name, name)
            if trust == PROJECT:
                why = _beyond_user(name, value, user)
                if why:
                    hold(key, why)
                else:
                    applied[name] = value
            elif not self.trusted:
                for shown in _entry_keys(name, value, key):
                    hold(shown, _NOT_TRUSTED)
                if name == "providers":
                    dropped.update(value)
            elif name == "hooks":
                applied[name] = tuple(replace(spec, trusted=True) for spec in value)
            elif name == "providers":
                kept = {}
                for provider, spec in value.items():
                    why = _credentials(spec.kind, spec.api_key_env, spec.base_url, user, self)
                    if why:
                        hold(f"providers.{provider}", why)
                        dropped.add(provider)
                    else:
                        kept[provider] = spec
                if kept:
                    applied[name] = kept
            elif name in ("api_key_env", "base_url", "bedrock_base_url"):
                kind = "bedrock" if name == "bedrock_base_url" else "anthropic"
                env = value if name == "api_key_env" else None
                url = value if name != "api_key_env" else None
                why = _credentials(kind, env, url, user, self)
                if why:
                    hold(key, why)
                else:
                    applied[name] = value
            else:
                applied[name] = value
        provider = applied.get("provider")
        if provider in dropped and provider not in user.providers:
            del applied["provider"]
            hold("provider", f"names the provider {provider!r}, whose table was not applied")
        return applied, withheld

    def notice(self) -> str | None:
        """What the user reads once when a session opens: the settings not applied, and how
        to trust the project. None when everything the project sets was applied."""
        if not self.withheld:
            return None
        lines = "\n".join(f"- {line}" for line in self.withheld)
        if self.state == "changed":
            new = "\n".join(f"- {item.line}" for item in self.changed)
            head = (
                f"This project ({self.root}) changed since you trusted it; what is new:\n{new}\n"
                "So its settings were not applied:"
            )
        elif self.trusted:
            head = f"Some settings of this project ({self.root}) were not applied:"
        else:
            head = (
                f"This project ({self.root}) is not trusted, so these settings of its own "
                "were not applied:"
            )
        how = (
            "Type /trust to see exactly what they would do and trust the project (your "
            f"decision is kept in {self.store}), or list it in trusted_projects in "
            f"{self.user_file}; `defect exec --trust-project` trusts it for one run."
        )
        return f"{head}\n{lines}\n{how}"

    def log_withheld(self) -> None:
        for line in self.withheld:
            log.warning("project_setting_not_applied", project=self.root, setting=line)


_FIELD_KEYS: dict[str, str] = {
    **{key.field: name for name, key in TOP_KEYS.items()},
    **{key.field: f"{t}.{s}" for t, table in TABLE_KEYS.items() for s, key in table.items()},
    **{fld: name for name, (fld, _) in SHAPED_KEYS.items()},
}
"""`Settings` field → the key a file sets it with (for the notice)."""


def _entry_keys(name: str, value: Any, key: str) -> Iterable[str]:
    """A withheld table field as the keys the user wrote (one per server, provider, hook)."""
    if name == "mcp_servers":
        return [f"mcp.servers.{server}" for server in value]
    if name == "providers":
        return [f"providers.{provider}" for provider in value]
    if name == "hooks":
        return [f"hooks.{spec.event}: {spec.command or spec.prompt}" for spec in value]
    return [key]


def _beyond_user(name: str, value: Any, user: Settings) -> str:
    """Why a setting a project may make untrusted still does not apply ("" when it does)."""
    if name == "max_tokens" and value > user.max_tokens:
        return f"above your limit of {user.max_tokens} (max_tokens of your configuration)"
    if name == "model":
        offered = {m for models in user.models.values() for m in models}
        offered |= {m for spec in user.providers.values() for m in spec.models}
        if offered and value not in offered:
            return "not a model your configuration offers"
    return ""


_DEFAULT_HOST = {
    "anthropic": re.compile(r"https://api\.anthropic\.com"),
    "bedrock": re.compile(r"https://bedrock-runtime\.[a-z0-9-]+\.amazonaws\.com"),
}
"""Each kind's own host (what the provider reaches when no base URL is set): a project may
name it, since credentials go there anyway."""


def _credentials(
    kind: str, key_env: str | None, url: str | None, user: Settings, trust: ProjectTrust
) -> str:
    """Why credentials could not go where a project says ("" when they may)."""
    mine = [spec for spec in user.providers.values() if spec.kind == kind]
    if kind == "anthropic" and key_env is not None:
        names = {DEFAULT_KEY_ENV, user.api_key_env, *(spec.api_key_env for spec in mine)}
        if key_env not in names:
            return (
                f"reads the key from ${key_env}, a variable your configuration does not name "
                "for a key (only your own configuration chooses where keys are read from)"
            )
    if url is None:
        return ""
    hosts = {user.base_url if kind == "anthropic" else user.bedrock_base_url}
    hosts |= {spec.base_url for spec in mine}
    if url in hosts or _DEFAULT_HOST[kind].fullmatch(url) or trust.confirmed:
        return ""
    return (
        f"would send your {kind} credentials to {url}, which your configuration does not name: "
        "/trust shows it and asks (or add it to your own configuration)"
    )


def decide(
    root: Path,
    items: list[Gated],
    user: Settings,
    store: Path,
    user_file: Path,
    *,
    trust_project: bool = False,
) -> ProjectTrust:
    """Whether the project at `root` (a real path) is trusted, and by what."""
    where = str(root.resolve())
    base = ProjectTrust(where, "untrusted", items=tuple(items), store=str(store))
    base = replace(base, user_file=str(user_file))
    if trust_project:
        return replace(base, state="trusted", how="--trust-project")
    decided = read_trust(store).get(where) if items else None
    if decided is not None:
        new = tuple(item for item in items if item.digest not in decided)
        if not new:
            return replace(base, state="trusted", how="/trust")
        base = replace(base, state="changed", changed=new)
    path = Path(where)
    for trusted in user.trusted_projects:
        if path == Path(trusted) or path.is_relative_to(trusted):
            return replace(base, state="trusted", how="trusted_projects", changed=())
    return base


def finish(
    trust: ProjectTrust, withheld: list[str], mcp_json: list[McpServerSpec], held: list[Any]
) -> ProjectTrust:
    """`trust` with what was not applied: the keys, and the servers `/trust` would start."""
    lines = list(withheld)
    if not trust.trusted:
        lines += [f"mcpServers.{spec.name} (.mcp.json): {_NOT_TRUSTED}" for spec in mcp_json]
    servers = [*held, *mcp_json] if not trust.trusted else []
    return replace(
        trust,
        withheld=tuple(lines),
        mcp_json=tuple(mcp_json),
        held_servers=tuple(servers),
    )
