"""`ray job submit -- python -m elastune.jobs.train [CONFIG.yaml | --from-sweep SWEEP_ID] [--set k=v ...]`

`elastune train` as a Ray job (e.g. a sweep's best config), with the same flags.
"""

from __future__ import annotations

import sys

from elastune.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
