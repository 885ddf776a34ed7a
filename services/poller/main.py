"""The poller service (Cloud Run).

Cloud Tasks delivers poll steps (queue flow-polls) here; a poll that is not ready re-enqueues
itself and returns at once.
"""

from __future__ import annotations

from relayflow.runtime import POLL_PATH, build_runtime, task_verifier
from relayflow.settings import load_settings
from relayflow.telemetry import configure_logging
from relayflow.web import task_app

configure_logging()
settings = load_settings()
app = task_app(
    build_runtime(settings), route=POLL_PATH, verifier=task_verifier(settings, settings.poller_url)
)
