"""`python -m defect_acp.transcript run|record …`: the same as `defect transcript run|record …`."""

from defect_acp.transcript.cli import main

raise SystemExit(main())
