"""`python -m defect_fakeapi`: the same as `defect fake-api`."""

import sys

from defect_fakeapi.cli import main

sys.exit(main())
