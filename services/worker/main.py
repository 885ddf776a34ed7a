"""The worker service (Cloud Run).

Cloud Tasks delivers action steps and compensations (queue flow-steps) here; Cloud Scheduler
calls /sweep.
"""

from __future__ import annotations

from relayflow.runtime import STEP_PATH, build_runtime, task_verifier
from relayflow.settings import load_settings
from relayflow.telemetry import configure_logging, configure_tracing
from relayflow.web.services import task_app

settings = load_settings()
configure_logging(project_id=settings.project_id)
runtime = build_runtime(settings, tracer=configure_tracing(settings, service="relayflow-worker"))
app = task_app(
    runtime,
    route=STEP_PATH,
    verifier=task_verifier(settings, settings.worker_url),
    sweep_verifier=task_verifier(settings, settings.worker_url, sweep=True),
)
