"""The poller service (Cloud Run).

Cloud Tasks delivers poll steps (queue flow-polls) here; a poll that is not ready re-enqueues
itself and returns at once.
"""

from __future__ import annotations

from relayflow.runtime import POLL_PATH, boot, task_verifier
from relayflow.web.services import task_app

runtime = boot("relayflow-poller")
settings = runtime.settings
app = task_app(
    runtime,
    route=POLL_PATH,
    verifier=task_verifier(settings, settings.poller_url),
    sweep_verifier=task_verifier(settings, settings.poller_url, sweep=True),
)
