"""What users and projects add to defect as Markdown files: slash commands, skills, agents.

`places` says where each kind lives, `frontmatter` reads a file's header, `commands`, `skills`
and `agents` (subagent profiles, for `spawn_agent`) load their kind.
"""
