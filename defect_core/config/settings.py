"""`Settings`, the resolved configuration a session runs with, and `ConfigError`.

Owns the shape of the configuration once resolved (`Settings`: every field, its default and
its meaning), one configured provider (`ProviderSpec`, a `[providers.NAME]` table), the
reasoning-effort levels, and the one error every layer raises.

Invariants:
- Settings are immutable once resolved; a session copies what it may change (model, mode,
  reasoning effort) into its own state.
- Secrets never live here: a setting may name the environment variable that holds a key
  (`api_key_env`), never the key itself.
- A `ConfigError` names where (the file with its line, the variable or the flag), the key, and
  what is wrong: a typo must not silently run a session on defaults.
- Cheap: the stdlib only (and `child_env`, itself stdlib only). Every layer above
  (`providers`, `store`, `tools`, the session) imports `Settings`, and it is on the
  `initialize` path (docs/architecture.md, rule 6); the MCP spec type is named for type
  checking only.

Why apart from the loading: most readers need the values, not where they came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from defect_core.child_env import EnvPolicy

if TYPE_CHECKING:
    from defect_core.config.trust import ProjectTrust
    from defect_core.hooks.spec import HookSpec
    from defect_core.mcp.spec import McpServerSpec

__all__ = [
    "EFFORT_LEVELS",
    "PROVIDER_KINDS",
    "ConfigError",
    "ModelSettings",
    "ProviderKind",
    "ProviderSpec",
    "Settings",
    "WebSearchSettings",
]

EFFORT_LEVELS = ("off", "low", "medium", "high")
ProviderKind = Literal["anthropic", "bedrock", "scripted", "openai"]
PROVIDER_KINDS: tuple[ProviderKind, ...] = ("anthropic", "bedrock", "scripted")
"""The kinds the plain keys imply a provider of; `openai` is only ever a `[providers.NAME]`
table (`config/providers.py`, `TABLE_KINDS`)."""


class ConfigError(ValueError):
    """A configuration that cannot be used. `str(e)` names where (file, variable or flag),
    the key, and what is wrong."""

    def __init__(self, source: str, key: str | None, problem: str, line: int | None = None) -> None:
        place = f"{source}, line {line}" if line is not None else source
        where = f"{place}: {key}" if key else place
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.key = key
        self.problem = problem
        self.line = line


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """What one model of an OpenAI-compatible provider takes
    (`[providers.NAME.model_settings."ID"]`): a Chat Completions server says none of it, so a
    parameter the model does not take is never sent (`providers/openai_compat/`)."""

    context_window: int | None = None
    """Tokens; None: the default of `session/options.py`."""
    max_output_tokens: int | None = None
    """A request's `max_tokens` never exceeds it; None: `max_tokens` as configured."""
    tools: bool = True
    """False: the model is offered no tools (the system prompt says why)."""
    images: bool = False
    """True: images go as data URLs; else as the `[image removed: …]` text."""
    reasoning: bool = False
    """True: `reasoning_effort` is sent (from the session's effort); else never."""


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """One model provider a session may use: its name (the model picker's group, the
    `provider` setting's value), its kind (the wire), where it is reached and which models it
    offers. Built from a `[providers.NAME]` table, or implied by the single-provider keys
    (`config/providers.py`)."""

    name: str
    kind: ProviderKind
    source: str
    """Where it is configured: a file's path, or the keys that imply it (for messages)."""
    api_key_env: str = "ANTHROPIC_API_KEY"
    base_url: str | None = None
    region: str | None = None
    profile: str | None = None
    models: tuple[str, ...] = ()
    """Empty: the kind's built-in list (its first entry is the default model)."""
    script_path: str | None = None
    model_settings: tuple[tuple[str, ModelSettings], ...] = ()
    """`openai` only: each model id's `ModelSettings` (a model not named takes the defaults)."""


@dataclass(frozen=True, slots=True)
class WebSearchSettings:
    """The hosted web search of one provider (`[capabilities.web_search]`, see
    `defect_core/config/capabilities.py`): `delegate` offers the provider's own search to the
    model, `disabled` does not."""

    mode: str = "disabled"
    max_uses: int = 5
    """Searches the model may run per model request."""
    allowed_domains: tuple[str, ...] | None = None
    blocked_domains: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    provider: str = "scripted"
    """The default provider: a kind (its implied provider) or a `[providers.NAME]` name."""
    model: str | None = None
    """None: the provider's default model."""
    max_tokens: int = 16_000
    max_turn_requests: int = 50
    """Model requests one prompt may make before the turn stops with `max_turn_requests`."""
    retries: int = 4
    retry_base_delay: float = 1.0
    retry_max_delay: float = 30.0
    reasoning_effort: str = "medium"
    """`off`, `low`, `medium`, `high`: maps to a thinking budget where the model supports it."""
    allow_read_outside: bool = False
    require_persistence: bool = False
    """Refuse `session/new` when the session store cannot be used, instead of running the
    session unsaved (with a warning)."""
    script_path: str | None = None
    """The offline model's script (`DEFECT_SCRIPT`)."""
    base_url: str | None = None
    """The Anthropic API's base URL (None: the SDK's default or `ANTHROPIC_BASE_URL`)."""
    api_key_env: str = "ANTHROPIC_API_KEY"
    """The name of the environment variable holding the Anthropic API key."""
    bedrock_base_url: str | None = None
    """A custom Bedrock runtime endpoint (None: the region's)."""
    aws_region: str | None = None
    aws_profile: str | None = None
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Model ids the model option offers, per provider name; a missing entry: built-ins."""
    context_windows: dict[str, int] = field(default_factory=dict)
    """Context window in tokens per model id, overriding what the provider knows."""
    providers: dict[str, ProviderSpec] = field(default_factory=dict)
    """The `[providers.NAME]` tables, by name (a later layer replaces a table of one name)."""
    capabilities: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Hosted-capability keys per scope ("" for every provider, else a provider name); read
    them with `config.web_search_for`."""
    mcp_servers: tuple[McpServerSpec, ...] = ()
    """MCP servers every session starts with (`[mcp.servers.NAME]`), besides `.mcp.json`'s."""
    read_timeout: float = 120.0
    """Seconds without a byte from the provider before a stream counts as stalled."""
    connect_timeout: float = 10.0
    ask_timeout: float = 600.0
    """Seconds a question to the user (`ask_user`, an MCP server's) waits for its answer."""
    terminal_shell: str = "/bin/sh"
    """The program the editor's terminal runs a command line with (`SHELL -c LINE`): clients
    exec `terminal/create`'s command without a shell."""
    fetch_allow_hosts: tuple[str, ...] = ()
    """`host` / `host:port` entries the fetch tool may reach although their addresses are not
    public (`[fetch] allow`; a later layer's list replaces an earlier one)."""
    hooks: tuple[HookSpec, ...] = ()
    """The `[hooks]` entries of every layer, in order (`config/hooks.py`); a project's own
    entries are applied (and marked trusted) only when that project is trusted."""
    trusted_projects: tuple[str, ...] = ()
    """Project roots trusted wholesale: their own settings apply (the user's file only)."""
    command_env_pass: tuple[str, ...] = ()
    """Secret-looking variables the commands, hooks and MCP servers defect starts get all the
    same (`[command_environment] pass`, the user's file only; `defect_core/child_env.py`)."""
    project: ProjectTrust | None = None
    """The project of the working directory the settings were resolved for: whether it is
    trusted, what of its own it sets that needs trust, and what was not applied
    (`config/trust.py`). None: no project's files were read."""
    goal_max_rounds: int = 20
    """Rounds a goal (`/goal`, `defect exec --goal`) may take before it stops; also the
    most times `before_turn_end` hooks may send one turn round again."""
    subagent_max_depth: int = 1
    """How deep subagents may nest (`spawn_agent`): 1 lets the session's agent start them and
    them none; 0 offers no `spawn_agent` at all."""
    background_max_tasks: int = 4
    """Background tasks (`spawn_agent` with `run_in_background`) one session runs at once."""
    checkpoint_max_mb: int = 1024
    """Megabytes of file checkpoint contents kept in the state directory (`[checkpoints]`);
    past it the oldest checkpoints are pruned (`defect_core/checkpoints/budget.py`)."""
    checkpoint_max_age_days: float = 30.0
    """Checkpoints older than this many days are pruned."""
    steering_interrupt_tools: bool = False
    """`[steering] interrupt_tools`: a message the user sends while a turn runs cancels the
    tool calls running then, so the model reads it at once (`session/steering.py`); off, it
    waits for them to finish."""
    sources: tuple[str, ...] = ()
    """The configuration files that were read, lowest layer first (for logs and errors)."""
    provider_origin: str = "the default"
    """What chose `provider`: a file's path, `DEFECT_PROVIDER`, `the --provider flag` or the
    default; a missing-credentials hint names it, so the user changes the right place."""

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]

    def env_policy(self) -> EnvPolicy:
        """What the processes a session starts inherit of defect's environment: not the
        credentials these settings read (each `api_key_env`), nor any secret-looking variable
        the user's file does not pass through (`defect_core/child_env.py`)."""
        keys = {self.api_key_env, *(spec.api_key_env for spec in self.providers.values())}
        return EnvPolicy.of(keys, self.command_env_pass)

    def models_for(self, provider: str) -> tuple[str, ...]:
        """The configured model ids of a provider (empty: use the provider's built-ins)."""
        return self.models.get(provider, ())
