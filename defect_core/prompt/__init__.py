"""The system prompt (see `defect_core/prompt/build.py`)."""

from defect_core.prompt.build import (
    BASE_PROMPT,
    PromptFacts,
    build_system_prompt,
    gather_prompt_facts,
    start_prompt_facts,
    system_prompt_from,
)
from defect_core.prompt.frontend import Frontend

__all__ = [
    "BASE_PROMPT",
    "Frontend",
    "PromptFacts",
    "build_system_prompt",
    "gather_prompt_facts",
    "start_prompt_facts",
    "system_prompt_from",
]
