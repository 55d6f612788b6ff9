"""`ray job submit -- python -m elastune.jobs.sweep SPEC [--memory-ceiling 1GiB] ...`

The same sweep as `elastune sweep`, with the same flags, run as a Ray job: inside a job, Ray sets
RAY_ADDRESS, so the sweep drives the cluster the job was submitted to.
"""

from __future__ import annotations

import sys

from elastune.cli import main

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))
