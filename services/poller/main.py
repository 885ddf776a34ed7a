"""The poller service (Cloud Run).

Cloud Tasks delivers poll steps (queue flow-polls) here; a poll that is not ready re-enqueues
itself and returns at once.
"""

from __future__ import annotations

from relayflow.runtime import POLL_PATH, build_runtime, task_verifier
from relayflow.settings import load_settings
from relayflow.telemetry import configure_logging, configure_tracing
from relayflow.web.services import task_app

settings = load_settings()
configure_logging(project_id=settings.project_id)
runtime = build_runtime(settings, tracer=configure_tracing(settings, service="relayflow-poller"))
app = task_app(
    runtime,
    route=POLL_PATH,
    verifier=task_verifier(settings, settings.poller_url),
    sweep_verifier=task_verifier(settings, settings.poller_url, sweep=True),
)
