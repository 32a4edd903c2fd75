"""An MCP server whose tools ask the user (MCP elicitation), on the official SDK's `MCPServer`.

Owns the tools the elicitation tests call; each returns what came of its question, so a test
reads the server's side of the answer in the tool's result:

- `pick_colour`: a form of one choice (`colour`: red or blue);
- `profile`: a form of two fields (`name`, `age`): not a single choice;
- `sign_in`: a page to open (URL mode, as an OAuth sign-in asks);
- `ask_later`: returns at once, and asks once the file `trigger` exists (no tool call runs
  then), writing what came of it to `out`.

Run: `python tests/mcp_servers/ask_server.py` (stdio).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Literal

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field


class Colour(BaseModel):
    colour: Literal["red", "blue"] = Field(description="The colour to use.")


class Profile(BaseModel):
    name: str = Field(description="Your name.")
    age: int = Field(description="Your age.")


READ_ONLY = types.ToolAnnotations(read_only_hint=True)
"""Run without a permission question: the only question a test sees is the server's."""


def build_server() -> MCPServer:
    server = MCPServer("ask", log_level="WARNING")

    @server.tool(description="Ask the user for a colour.", annotations=READ_ONLY)
    async def pick_colour(ctx: Context) -> str:
        try:
            result = await ctx.elicit("Which colour?", Colour)
        except Exception as exc:
            return f"elicitation failed: {exc}"
        if result.action == "accept":
            return f"server got: {result.data.colour}"
        return f"server got: {result.action}"

    @server.tool(description="Ask the user for a profile.", annotations=READ_ONLY)
    async def profile(ctx: Context) -> str:
        try:
            result = await ctx.elicit("Who are you?", Profile)
        except Exception as exc:
            return f"elicitation failed: {exc}"
        if result.action == "accept":
            return f"server got: {result.data.name}, {result.data.age}"
        return f"server got: {result.action}"

    @server.tool(description="Ask the user to sign in on a page.", annotations=READ_ONLY)
    async def sign_in(ctx: Context) -> str:
        try:
            result = await ctx.elicit_url(
                "Sign in to continue", "https://auth.example/sign-in?state=abc", "sign-in-1"
            )
        except Exception as exc:
            return f"elicitation failed: {exc}"
        if result.action == "accept":  # the sign-in happened out of band: say it is done
            await ctx.request_context.session.send_elicit_complete("sign-in-1")
        return f"server got: {result.action}"

    @server.tool(description="Ask the user later, once a file exists.", annotations=READ_ONLY)
    async def ask_later(trigger: str, out: str, ctx: Context) -> str:
        session = ctx.request_context.session

        async def later() -> None:
            while not os.path.exists(trigger):
                await asyncio.sleep(0.02)
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            try:
                result = await session.elicit_form("Still there?", schema)
                text = json.dumps({"action": result.action, "content": result.content})
            except Exception as exc:
                text = json.dumps({"error": str(exc)})
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)

        _later.append(asyncio.get_running_loop().create_task(later()))
        return "scheduled"

    return server


_later: list[asyncio.Task[None]] = []
"""`ask_later`'s questions, kept until they are asked."""


if __name__ == "__main__":
    build_server().run("stdio")
