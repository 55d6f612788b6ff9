"""`python -m elastune.cli ...`: the `elastune` command from a module path (used by tests, bench and
jobs that must run the same interpreter)."""

import sys

from elastune.cli.app import main

sys.exit(main())
