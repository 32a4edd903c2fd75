"""What users and projects add to defect as Markdown files: slash commands and skills.

`places` says where each kind lives, `frontmatter` reads a file's header, `commands` and
`skills` load their kind. Agent profiles (`agents/`) will join them the same way.
"""
