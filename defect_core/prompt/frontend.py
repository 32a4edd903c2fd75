"""How a session is reached: the front end the system prompt's environment section describes.

Owns `Frontend`. It is defined here, at the prompt's layer below the session door (which
re-exports it), so the prompt never imports the session package above it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Frontend:
    """How the session is reached; feeds the system prompt's environment section."""

    name: str = "acp"
    client_name: str | None = None
    fs_delegated: bool = False
    terminal_delegated: bool = False
    interactive: bool = False
    """Whether someone can answer a question (`ask_user`, an MCP server's): an editor can;
    `defect exec` and a library without a front end cannot, and are answered at once that
    no one is there (`session/questions.py`)."""
