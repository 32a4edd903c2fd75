"""Where the catalog's files live: the user's config directory, then the project's `.defect/`.

Owns `catalog_places` and `catalog_dirs`. For a kind such as `commands`, the places are
`$XDG_CONFIG_HOME/defect/commands/` (default `~/.config/defect/commands/`) and
`<repository root>/.defect/commands/`, in that order: a project file replaces a user file of the
same name, as the project's config layer overrides the user's (`defect_core/config/resolve.py`).

Invariant: each place carries its boundary, the directory its files must really lie in
(`defect_core/confined.py`): the user's configuration directory (`~/.config/defect`) for the
user's place, the repository root for the project's. A `.defect/` that is itself a link out
of the repository lends its files no standing: each is refused where it really lies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from defect_core.confined import config_paths

Scope = Literal["user", "project"]


@dataclass(frozen=True, slots=True)
class Place:
    scope: Scope
    directory: Path
    boundary: Path
    """What the directory's files must really lie in: the user's config dir, or the project."""


def catalog_places(
    kind: str, cwd: Path | None, env: Mapping[str, str] | None = None
) -> list[Place]:
    paths = config_paths(cwd, env)
    user_dir = paths[0].parent
    places = [Place("user", user_dir / kind, user_dir)]
    if len(paths) > 1:
        project_dir = paths[1].parent  # <repo>/.defect
        places.append(Place("project", project_dir / kind, project_dir.parent))
    return places


def catalog_dirs(
    kind: str, cwd: Path | None, env: Mapping[str, str] | None = None
) -> list[tuple[Scope, Path]]:
    return [(place.scope, place.directory) for place in catalog_places(kind, cwd, env)]
