"""The web UI (installed as elastune.ui): launch and follow jobs, compare trials, watch EDO memory.

`elastune ui` starts it (see docs/ui.md). The library never imports this package; the CLI
loads it by name (platform/elastune/cli/ui.py).
"""

from elastune.ui.app import create_app, serve
from elastune.ui.settings import UISettings, check_bind

__all__ = ["UISettings", "check_bind", "create_app", "serve"]
