"""The worker service (Cloud Run).

Cloud Tasks delivers action steps and compensations (queue flow-steps) here, and bulk actions'
batches (/tasks/bulk); Cloud Scheduler calls /sweep.
"""

from __future__ import annotations

from relayflow.runtime import STEP_PATH, boot, task_verifier
from relayflow.web.services import task_app

runtime = boot("relayflow-worker")
settings = runtime.settings
app = task_app(
    runtime,
    route=STEP_PATH,
    verifier=task_verifier(settings, settings.worker_url),
    sweep_verifier=task_verifier(settings, settings.worker_url, sweep=True),
    bulk=True,
)
