"""`python -m defect_acp` runs the `defect` command."""

from defect_acp.cli import main

raise SystemExit(main())
