"""The long-poll of ``GET /flows/{id}?wait_s=…``: answer as soon as the flow ends.

For callers that cannot subscribe to ``flow-results`` (``Client(wait="api")``, a shell
script's curl). The request does not read in a loop: it follows the flow's document with a
Firestore snapshot listener (one listen stream while it waits; Firestore sends each change
of the document as it commits, and the wait ends on the first one that is an end) and
answers the document then, or when ``wait_s`` has passed, whichever is first — the caller
tells the two apart by ``status``. A flow that does not exist yet (its start message not
taken yet) is waited for the same way, under the tenant the request names (or the default).

``wait_s`` is capped at ``MAX_WAIT_S``: a Cloud Run request ends at the service's request
timeout (300 s unless set, https://cloud.google.com/run/docs/configuring/request-timeout)
and each waiting request holds one of the instance's request threads, so a long wait is
several long-polls, each well inside any timeout a proxy or load balancer in front may set.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from relayflow.core.records import FlowRecord
from relayflow.core.state import TERMINAL
from relayflow.web.params import BadRequest

log = logging.getLogger("relayflow.web.longpoll")
MAX_WAIT_S = 60.0

# watch(key, on_change) follows the document of ``key``: ``on_change`` gets each version of it
# (None while there is none) on the listener's thread; the returned callable stops it.
OnChange = Callable[[FlowRecord | None], None]
Watch = Callable[[str, OnChange], Callable[[], None]]


def wait_param(raw: str | None) -> float | None:
    """``wait_s``: seconds, 0..MAX_WAIT_S (absent: no wait)."""
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest(f"wait_s must be a number of seconds, got {raw[:20]!r}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_WAIT_S:
        raise BadRequest(f"wait_s must be 0..{MAX_WAIT_S:g} seconds, got {raw[:20]!r}")
    return value


def generation_param(raw: str | None) -> int:
    """``generation``: the oldest run whose end answers the wait (absent: 0)."""
    if raw is None or raw == "":
        return 0
    if not raw.isdigit() or len(raw) > 9:
        raise BadRequest(f"generation must be a whole number >= 0, got {raw[:20]!r}")
    return int(raw)


def has_ended(record: FlowRecord | None, generation: int) -> bool:
    """Whether ``record`` is an end that answers a wait for ``generation`` or later."""
    return (
        record is not None
        and record.status in TERMINAL
        and record.result is not None
        and record.position.generation >= generation
    )


def wait_for_end(
    watch: Watch, key: str, *, wait_s: float, generation: int
) -> tuple[FlowRecord | None, bool]:
    """Follow the document of ``key`` until it has ended (``has_ended``) or ``wait_s`` has
    passed: the newest version seen (None: there was none), and whether it has ended."""
    latest: list[FlowRecord | None] = [None]
    ended = threading.Event()

    def changed(record: FlowRecord | None) -> None:
        latest[0] = record
        if has_ended(record, generation):
            ended.set()

    stop = watch(key, changed)
    try:
        finished = ended.wait(wait_s)
    finally:
        stop()
    return latest[0], finished
