"""The local stack's component names and defaults, with no imports: the CLI reads them to
print its help, which must be instant (bench/cli_startup.py)."""

from __future__ import annotations

from pathlib import Path

EMULATORS = ("pubsub", "firestore", "cloud_tasks", "storage")
FAKES = ("client_api", "orders_api")
SERVICES = ("start_function", "worker", "poller", "api", "sweeper")
ALL = (*EMULATORS, *FAKES, *SERVICES)
GROUPS = {"emulators": EMULATORS, "services": SERVICES, "all": ALL}
DEFAULT_BASE_PORT = 8120
# Where a stack keeps its state, logs and env file (relative to where ``local up`` ran).
DEFAULT_STATE_DIR = Path(".relayflow/local")
