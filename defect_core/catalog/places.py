"""Where the catalog's files live: the user's config directory, then the project's `.defect/`.

Owns `catalog_dirs`. For a kind such as `commands`, the places are
`$XDG_CONFIG_HOME/defect/commands/` (default `~/.config/defect/commands/`) and
`<repository root>/.defect/commands/`, in that order: a project file replaces a user file of the
same name, as the project's config layer overrides the user's (`defect_core/config.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from defect_core.config import config_paths

Scope = Literal["user", "project"]


def catalog_dirs(
    kind: str, cwd: Path | None, env: Mapping[str, str] | None = None
) -> list[tuple[Scope, Path]]:
    paths = config_paths(cwd, env)
    places: list[tuple[Scope, Path]] = [("user", paths[0].parent / kind)]
    if len(paths) > 1:
        places.append(("project", paths[1].parent / kind))
    return places
