"""`/trust` and `/trust revoke`: trusting the session's project from the editor.

Owns `ProjectTrusting`, the answer to both commands for one session: `/trust` shows exactly
what the project would change (each server with its full command line, each host requests
would go to, each variable a key would be read from, every other gated setting:
`config/trust.py`, `Gated`), asks through a permission question (`session/request_permission`
over ACP), and on "allow" records the decision — the digests of what was shown — in the user's
trust file (`config/trust_store.py`), then starts the project's MCP servers in this session;
its other settings apply from the next session, which the answer says. `/trust revoke` removes
the decision and stops the servers `/trust` started here.

Invariants:
- Trust covers what the user saw: the digests recorded are those of the items the question
  listed, so a project that later adds a server or a host is untrusted again until asked anew.
- Nothing is recorded without an explicit "allow": a rejection, a cancel or a client that
  cannot answer leaves the trust file as it was.
- The editor's own servers win a name clash: a project server of the same name is not started.
- The servers started here are stopped with the session (`aclose`) or by `/trust revoke`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.config.trust import ProjectTrust
from defect_core.config.trust_store import TrustFileError, forget_trust, record_trust
from defect_core.events import PermissionOption, PermissionRequested, TextDisplay
from defect_core.log import get_logger
from defect_core.mcp import McpHub
from defect_core.tools.base import ToolRegistry

__all__ = ["TRUST_ALLOW", "ProjectTrusting"]

log = get_logger("defect.agent")

TRUST_ALLOW = "allow_once"
TRUST_REJECT = "reject_once"
_OPTIONS = (
    PermissionOption(TRUST_ALLOW, "Trust this project", "allow_once"),
    PermissionOption(TRUST_REJECT, "Do not trust it", "reject_once"),
)


class ProjectTrusting:
    """`/trust` and `/trust revoke` for one session's project."""

    def __init__(
        self,
        project: ProjectTrust | None,
        cwd: Path,
        tools: ToolRegistry,
        ask: Callable[[PermissionRequested], Awaitable[str | None]],
        session_servers: McpHub | None,
        env: EnvPolicy = DEFAULT_POLICY,
    ) -> None:
        self._project = project
        self._env = env
        """What the servers it starts inherit (`defect_core/child_env.py`)."""
        self._cwd = cwd
        self._tools = tools
        self._ask = ask
        self._session_servers = session_servers
        """The servers the session opened with (the editor's among them)."""
        self._hub: McpHub | None = None

    async def answer(self, args: str) -> str:
        words = args.split()
        if words and words[0] == "revoke":
            return await self._revoke()
        if words:
            return "Usage: /trust — review and trust this project; /trust revoke — take it back."
        return await self._trust()

    async def _trust(self) -> str:
        project = self._project
        if project is None or not project.items:
            return "This project sets nothing that needs trust."
        if project.trusted and project.confirmed:
            return (
                f"This project ({project.root}) is already trusted ({project.how}). "
                "/trust revoke takes that back."
            )
        shown = "\n".join(f"- {item.line}" for item in project.items)
        question = PermissionRequested(
            tool_call_id=f"trust-{uuid.uuid4().hex[:12]}",
            title=f"Trust the project {project.root}?",
            kind="other",
            raw_input={"project": project.root, "settings": [i.line for i in project.items]},
            options=_OPTIONS,
            content=(
                TextDisplay(
                    f"Trusting {project.root} lets its own files do this:\n{shown}\n\n"
                    f"Your decision is kept in {project.store}; if the project later changes "
                    "any of this, it is untrusted again until you trust it anew."
                ),
            ),
        )
        if await self._ask(question) != TRUST_ALLOW:
            return "Not trusted: nothing was changed."
        try:
            record_trust(Path(project.store), project.root, project.digests)
        except (TrustFileError, OSError) as exc:
            return f"Could not record your decision, so the project stays untrusted: {exc}"
        log.info("project_trusted", project=project.root, settings=len(project.items))
        return f"Trusted {project.root} (recorded in {project.store}).{await self._start()}"

    async def _start(self) -> str:
        """Start the project's servers in this session; what the user reads about it."""
        assert self._project is not None
        opened = self._session_servers
        running = {*opened.servers, *(name for name, _ in opened.failures)} if opened else set()
        specs = [s for s in self._project.held_servers if s.name not in running]
        said = ""
        if specs and self._hub is None:
            self._hub = await McpHub.connect(specs, self._cwd, env=self._env)
            if opened is not None:
                self._hub.ask_like(opened)  # their elicitations ask the session's user
            for tool in self._hub.tools:
                self._tools.add(tool)
            if self._hub.servers:
                said += f" Started its MCP servers: {', '.join(self._hub.servers)}."
            if notice := self._hub.failure_notice():
                said += f"\n{notice}"
        return (
            f"{said}\nIts other settings apply from the next session in this project "
            "(open a new one to use them)."
        )

    async def _revoke(self) -> str:
        project = self._project
        if project is None:
            return "This project sets nothing that needs trust; there is nothing to revoke."
        try:
            removed = forget_trust(Path(project.store), project.root)
        except (TrustFileError, OSError) as exc:
            return f"Could not change {project.store}: {exc}"
        stopped = ""
        if self._hub is not None:
            names = self._hub.servers
            for tool in self._hub.tools:
                self._tools.remove(tool.name)
            await self._hub.aclose()
            self._hub = None
            if names:
                stopped = f" Stopped its MCP servers: {', '.join(names)}."
        head = (
            f"Trust in {project.root} revoked (removed from {project.store})."
            if removed
            else f"{project.root} was not trusted with /trust."
        )
        if project.how == "trusted_projects":
            head += (
                f" It is still listed in trusted_projects in {project.user_file}: remove it "
                "there (defect does not edit your configuration)."
            )
        return f"{head}{stopped} New sessions in this project will not apply its settings."

    async def aclose(self) -> None:
        if self._hub is not None:
            await self._hub.aclose()
            self._hub = None
