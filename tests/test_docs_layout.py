"""docs/architecture.md's module map and docs/layers.md's layers are those of the code.

The module map must name every module of every root package (pyproject.toml's
`[tool.importlinter] root_packages`, walked on disk) and nothing that does not exist; every
layer docs/layers.md states — the table of `defect_core` and each package's "lowest first"
order — must be the `layers` contract pyproject.toml gives that container
(`tests/support/doc_layout.py`). The last tests break each rule in a copy of the text, so
neither check can pass vacuously.
"""

from __future__ import annotations

from tests.support.doc_layout import (
    REPO,
    contracts,
    layer_problems,
    layer_rows,
    map_problems,
    module_map,
    package_orders,
)

ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
LAYERS = (REPO / "docs" / "layers.md").read_text(encoding="utf-8")


def test_the_module_map_names_every_module_and_only_modules() -> None:
    assert len(module_map(ARCHITECTURE)) >= 4
    assert map_problems(ARCHITECTURE) == []


def test_the_layers_stated_are_the_contracts() -> None:
    layered = [c for c in contracts() if c["type"] == "layers"]
    assert len(layer_rows(LAYERS)) >= 10 and len(package_orders(LAYERS)) >= len(layered) - 1
    assert layer_problems(LAYERS) == []


def test_a_module_left_out_or_made_up_is_found() -> None:
    text = ARCHITECTURE.replace("                   stored_messages.py\n", "", 1)
    text = text.replace("· tree.py", "· ghost.py", 1)
    text = text.replace("frontend.py (Frontend", "frontend (Frontend", 1)
    assert map_problems(text) == [
        "defect_core/prompt/frontend.py is not named in the entry prompt/",
        "defect_core/store/tree.py is not named in the entry store/",
        "defect_core/stored_messages.py is not in the module map",
        "the module map names ghost.py under defect_core/store/: no such module",
    ]


def test_a_layer_out_of_step_is_found() -> None:
    text = LAYERS.replace("`toolset` | `trusting` → `call_records`", "`toolset` → `call_records`")
    text = text.replace("| 2½ | `catalog` |", "| 2½ | `catalog` \\| `goal` |")
    text = text.replace("`restore` | `fs` | `shell`", "`restore` | `fs`")
    problems = layer_problems(text)
    assert len(problems) == 3, problems
    assert problems[0].startswith("docs/layers.md: defect_core: ")
    assert "goal | catalog" in problems[0] or "catalog | goal" in problems[0]
    assert problems[1].startswith("docs/layers.md: defect_core.session: ")
    assert problems[2].startswith("docs/layers.md: defect_core.checkpoints: ")


def test_the_top_packages_out_of_step_are_found() -> None:
    text = LAYERS.replace(
        "lowest first, `defect_core` → `defect_acp` →",
        "lowest first, `defect_acp` → `defect_core` →",
    )
    assert text != LAYERS
    [problem] = layer_problems(text)
    assert problem.startswith("docs/layers.md: the top packages: defect_acp → defect_core"), problem
