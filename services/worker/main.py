"""The worker service (Cloud Run).

Cloud Tasks delivers action steps and compensations (queue flow-steps) here; Cloud Scheduler
calls /sweep.
"""

from __future__ import annotations

from relayflow.runtime import STEP_PATH, build_runtime, task_verifier
from relayflow.settings import load_settings
from relayflow.telemetry import configure_logging
from relayflow.web import task_app

configure_logging()
settings = load_settings()
app = task_app(
    build_runtime(settings), route=STEP_PATH, verifier=task_verifier(settings, settings.worker_url)
)
