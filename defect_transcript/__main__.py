"""`python -m defect_transcript run|record …`: the same as `defect transcript run|record …`."""

from defect_transcript.cli import main

raise SystemExit(main())
