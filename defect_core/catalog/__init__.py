"""What users and projects add to defect as Markdown files: slash commands, skills, agents.

`places` says where each kind lives (and the boundary its files must really lie in),
`frontmatter` reads a file's header, `commands`, `skills` and `agents` (subagent profiles, for
`spawn_agent`) load their kind. Every file is read through `defect_core/confined.py`: a file of
a project's `.defect/` that links out of the project is never read.
"""
