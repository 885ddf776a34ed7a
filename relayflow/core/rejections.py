"""What a refused task is recorded as in ``rejected``: a task body that can never be run (it does
not parse, or names a flow id Firestore reserves) is kept there with its reason, for operators,
until it expires, and answered 2xx so Cloud Tasks does not retry it.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from typing import Any

# A task name as a document id: as it is when it is one of ours, hashed when it is not.
SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,500}")  # MAX_TASK_ID: every name we give
MAX_SHOWN_NAME = 500
MAX_KEPT_BODY_BYTES = 16384


def rejected_task_id(task_name: str) -> str:
    """The ``rejected`` document id of a task: ``task-{name}`` for a name Cloud Tasks could
    have given (ours are ``[A-Za-z0-9_-]``), else a hash of it. A ``/``, ``..`` or ``__x__``
    in a document id would make Firestore refuse the write: a 500, so the task retried."""
    if SAFE_NAME.fullmatch(task_name):
        return f"task-{task_name}"
    digest = hashlib.sha256(task_name.encode("utf-8", errors="replace")).hexdigest()
    return f"task-sha256-{digest[:40]}"


def rejected_task(
    task_name: str, reason: str, body: bytes, *, now: datetime, retention_days: float
) -> tuple[str, dict[str, Any]]:
    """The ``rejected`` document of a task refused ``now``: its id and its fields (the name and
    the body bounded, kept ``retention_days``)."""
    record = {
        "kind": "task",
        "task": task_name[:MAX_SHOWN_NAME],
        "reason": reason,
        "body": body[:MAX_KEPT_BODY_BYTES],
        "rejected_at": now,
        "expire_at": now + timedelta(days=retention_days),
    }
    return rejected_task_id(task_name), record
