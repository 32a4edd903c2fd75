"""An MCP server whose tools ask the user (MCP elicitation), on the official SDK's `MCPServer`.

Owns the tools the elicitation tests call; each returns what came of its question, so a test
reads the server's side of the answer in the tool's result:

- `pick_colour`: a form of one choice (`colour`: red or blue);
- `profile`: a form of two fields (`name`, `age`): not a single choice;
- `sign_in`: a page to open (URL mode, as an OAuth sign-in asks).

Run: `python tests/mcp_servers/ask_server.py` (stdio).
"""

from __future__ import annotations

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
        return f"server got: {result.action}"

    return server


if __name__ == "__main__":
    build_server().run("stdio")
