"""Hosted capabilities: what a session asks the provider to run itself, and how it shows.

Owns the start-up adjudication of a session's hosted capabilities (`hosted_web_search`: the
web search a session's requests offer, or `CapabilityUnsatisfied` when the configuration
delegates to a provider that cannot run it), and how a hosted web search is shown to the user
(`search_title`, `search_outcome`), live and on replay alike.

Invariants:
- A session delegates nothing its provider cannot do: `session/new` (and load) fails with an
  error naming the capability, the provider, and both ways to fix the configuration, instead
  of a session whose every request the provider refuses.
- A search is shown from its blocks only (the query of its `server_tool_use`, the hits or
  error of its `web_search_tool_result`), so a replay shows what the live turn showed.

Why a room of its own: the configuration, the provider and the turn each know a part of a
hosted capability; the rule tying them and the user's view of it are stated once, here.
"""

from __future__ import annotations

from defect_core.config import Settings, web_search_for
from defect_core.errors import InvalidOption
from defect_core.model import ServerToolUseBlock, WebSearchError, WebSearchResultBlock
from defect_core.providers.base import HostedWebSearch, hosted_capabilities

__all__ = [
    "CapabilityUnsatisfied",
    "hosted_web_search",
    "search_outcome",
    "search_title",
]


class CapabilityUnsatisfied(InvalidOption):
    """The configuration delegates a capability to a provider that cannot run it."""

    def __init__(self, capability: str, provider: str) -> None:
        super().__init__(
            f"{capability} capability is unsatisfied: provider `{provider}` does not support "
            f"hosted {capability}. To fix this, choose one of: "
            f"1. disable hosted {capability} for this provider: [{provider}.capabilities."
            f'{capability}] mode = "disabled"; '
            f"2. use a provider that supports it (anthropic), or set the global default to "
            f'disabled ([capabilities.{capability}] mode = "disabled") and delegate only where '
            f'supported ([anthropic.capabilities.{capability}] mode = "delegate").'
        )
        self.capability = capability
        self.provider = provider


def hosted_web_search(settings: Settings, provider: object) -> HostedWebSearch | None:
    """The web search a session on `provider` offers its model (None: `disabled`).

    Raises `CapabilityUnsatisfied` for `delegate` on a provider that cannot search."""
    name = str(getattr(provider, "name", settings.provider))
    config = web_search_for(settings.capabilities, name)
    if config.mode != "delegate":
        return None
    if "web_search" not in hosted_capabilities(provider):
        raise CapabilityUnsatisfied("web_search", name)
    return HostedWebSearch(
        max_uses=config.max_uses,
        allowed_domains=config.allowed_domains,
        blocked_domains=config.blocked_domains,
    )


def search_title(use: ServerToolUseBlock) -> str:
    """`Web search: <query>` (the tool's name when it has no query)."""
    query = use.input.get("query")
    if isinstance(query, str) and query.strip():
        return f"Web search: {query.strip()}"
    return f"Web search ({use.name})"


def search_outcome(result: WebSearchResultBlock | None) -> tuple[bool, str]:
    """(succeeded, text to show): the hits as a Markdown list of titles and URLs, or why
    there are none."""
    if result is None:
        return False, "The web search was interrupted; no result was recorded."
    if isinstance(result.content, WebSearchError):
        return False, f"The web search failed: {result.content.error_code}"
    if not result.content:
        return True, "No results."
    lines = [f"- [{hit.title or hit.url}]({hit.url})" for hit in result.content]
    return True, "\n".join(lines)
