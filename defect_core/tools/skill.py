"""The `skill` tool: the model reads a skill's instructions, or a file beside them, on demand.

Owns `SkillTool`. The session offers it only when skills exist (`defect_core/catalog/skills.py`
finds them; the system prompt lists their names and descriptions). Reading is all it does:
no permission question, never outside the skill's own directory (the catalog enforces it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from defect_core.catalog.skills import Skill, SkillFileError, read_skill_file
from defect_core.events import ToolKind
from defect_core.tools.base import (
    ModelTool,
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
)
from defect_core.tools.workspace import ToolArgs, parse_args


class SkillArgs(ToolArgs):
    name: str = Field(description="The skill's name, as listed in the system prompt.")
    file: str | None = Field(
        default=None,
        description="A file inside the skill's folder to read instead of its SKILL.md.",
    )


class SkillTool(ModelTool):
    args_model = SkillArgs

    def __init__(self, skills: Sequence[Skill]) -> None:
        self._skills = {skill.name: skill for skill in skills}

    @property
    def name(self) -> str:
        return "skill"

    @property
    def description(self) -> str:
        return (
            "Read a skill's instructions (its SKILL.md) before doing the task it describes, "
            "or one of the files it points to. The skills are listed in the system prompt."
        )

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY

    @property
    def kind(self) -> ToolKind:
        return "read"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        args = args if isinstance(args, dict) else {}
        name, file = args.get("name"), args.get("file")
        title = f"Skill {name}" if isinstance(name, str) else "Skill"
        if isinstance(file, str) and file:
            title += f": {file}"
        return ToolCallView(title=title, kind="read")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        import anyio

        a = parse_args(self.args_model, args, self.name)
        skill = self._skills.get(a.name)
        if skill is None:
            known = ", ".join(sorted(self._skills)) or "none"
            raise ToolError(f"no skill named `{a.name}` (skills: {known})")
        try:
            text = await anyio.to_thread.run_sync(read_skill_file, skill, a.file)
        except SkillFileError as err:
            raise ToolError(str(err)) from None
        return ToolOutput(text)
