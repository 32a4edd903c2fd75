"""`python -m defect_cli` runs the `defect` command (how tests and scripts start `defect acp`
from a checkout)."""

from defect_cli.cli import main

raise SystemExit(main())
