"""The README and docs/ show only what exists: commands, options, config keys, links, variables.

Each check is derived from the code (`tests/support/doc_checks.py`): the real CLI's `--help`,
the configuration parser and its key tables, the files on disk, the variables the code reads.
A rename elsewhere fails here on the prose that still says the old name. The last test feeds
the checks a page with one wrong thing of each kind, so that none of them can pass vacuously.
"""

from __future__ import annotations

from tests.support.doc_checks import (
    Doc,
    code_doc_problems,
    command_problems,
    doc_files,
    env_problems,
    link_problems,
    relative_readme_links,
    repository_url,
    shown_commands,
    toml_blocks,
    toml_problems,
    unlinked_pages,
)


def test_the_docs_are_found() -> None:
    docs = doc_files()
    names = {doc.name for doc in docs}
    assert {"README.md", "CONTRIBUTING.md", "docs/architecture.md"} <= names
    assert sum(1 for doc in docs for _ in shown_commands(doc)) >= 20
    assert sum(1 for doc in docs for _ in toml_blocks(doc)) >= 8


def test_every_command_shown_is_one_the_cli_accepts() -> None:
    assert command_problems(doc_files()) == []


def test_every_configuration_shown_is_one_the_parser_accepts() -> None:
    assert toml_problems(doc_files()) == []


def test_every_link_and_repository_path_resolves() -> None:
    assert link_problems(doc_files()) == []


def test_the_readme_links_every_page() -> None:
    assert unlinked_pages(doc_files()) == []
    readme = Doc("README.md", "[one](docs/editors.md) and [two](docs/tools.md#x)")
    pages = [readme, Doc("docs/editors.md", ""), Doc("docs/tools.md", ""), Doc("docs/x.md", "")]
    assert unlinked_pages(pages) == ["docs/x.md"]


def test_the_readme_links_files_by_absolute_address_for_pypi() -> None:
    readme = next(doc for doc in doc_files() if doc.name == "README.md")
    assert relative_readme_links(readme) == []
    page = Doc("README.md", f"[a]({repository_url()}/blob/main/docs/a.md) [b](docs/b.md) [c](#c)")
    assert relative_readme_links(page) == ["docs/b.md"]
    missing = link_problems([page])
    assert "README.md: link to a missing file: docs/a.md" in missing, missing


def test_every_page_the_code_names_exists() -> None:
    assert code_doc_problems() == []


def test_every_defect_variable_named_is_read_by_the_code() -> None:
    assert env_problems(doc_files()) == []


WRONG = """# A page

## Set-up

```sh
defect exec --mode sometimes "hi"
defect exec --no-such-flag "hi"
git diff | defect no-such-command
defect acp --resume
```

Run `defect fake-api --no-such-port 1` or `defect transcript run x.jsonl`.

```toml
provider = "scripted"
no_such_key = 1
```

```toml
[checkpoints]
max_mb = 1
```

```toml
[providers.work]
kind = "bedrock"
api_key_env = "X"
```

Inline, `no_such_top_key = 1` is wrong and `max_age_days = 3` (in `[checkpoints]`) is right.

See docs/no-such-guide.md, [a page](no-such-page.md), [a heading](#no-such-heading),
[this one](#set-up),
`defect_core/no_such_module.py` and `DEFECT_NO_SUCH_VARIABLE` (but `DEFECT_PROVIDER` is read).
"""


def test_the_checks_find_each_kind_of_mistake() -> None:
    docs = [Doc("docs/wrong.md", WRONG)]
    commands = command_problems(docs)
    assert len(commands) == 4, commands
    assert "--mode sometimes: not one of ask, accept-edits, read-only, yolo" in commands[0]
    assert "--no-such-flag is not an option of defect exec" in commands[1]
    assert "defect no-such-command is refused" in commands[2]
    assert "--no-such-port is not an option of defect fake-api" in commands[3]
    config = toml_problems(docs)
    assert len(config) == 3, config
    assert "no_such_key: unknown key" in config[0]
    assert "providers.work.api_key_env" in config[1]
    assert "no_such_top_key: unknown key" in config[2]
    links = link_problems(docs)
    assert links == [
        "docs/wrong.md: link to a missing file: no-such-page.md",
        "docs/wrong.md: link to a missing heading: #no-such-heading",
        "docs/wrong.md: no such file: docs/no-such-guide.md",
        "docs/wrong.md: no such file: defect_core/no_such_module.py",
    ]
    assert env_problems(docs) == ["docs/wrong.md: DEFECT_NO_SUCH_VARIABLE is read nowhere"]
