"""Callbacks: a one-use token, handed out by a callback step, completed from outside.

A token names its flow's key (or its ForEach lane's) and a secret; it is compared in constant
time. Completed before the step's run has committed, it is kept on the track and applied when
the run commits; completed twice, late, or for an ended flow, it changes nothing and the answer
says why. A caller whose tenant scope does not admit the flow is answered exactly as for a token
no flow has, so the answer tells nothing of the flow.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import Any

from relayflow.core.engine.execution import completed
from relayflow.core.engine.focus import fitting
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.outcomes import CallbackAnswer, Completion, Ran
from relayflow.core.errors import InvalidMessage, UnknownFlow
from relayflow.core.kinds.callback import signal
from relayflow.core.planner import Completed, Failed, Retry
from relayflow.core.position import TASK_FLOW_PATTERN, is_document_id
from relayflow.core.records import FlowRecord, split_key
from relayflow.core.state import ACTIVE, TERMINAL, Status


class Callbacks:
    """Completes callback tokens."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def complete(
        self, token: str, completion: dict[str, Any], *, visible: Callable[[str], bool] | None
    ) -> CallbackAnswer:
        """Complete ``token`` with ``{"output": {...}}`` or ``{"error": {...}}``."""
        key = token.rpartition(".")[0]  # a flow's key, or a ForEach lane's
        if not re.fullmatch(TASK_FLOW_PATTERN[1:-1], key) or not is_document_id(key):
            return CallbackAnswer(Completion.IGNORED, "not a callback token")
        flow_id = split_key(key)[1]  # what the answer names: the caller's id, not the key
        found = self._k.read(key)
        if found is None or (visible is not None and not visible(found.record.tenant)):
            return CallbackAnswer(Completion.IGNORED, "no flow has this token", flow_id)
        track = track_with(found.record, token)
        if track is None:
            return CallbackAnswer(Completion.IGNORED, self._why_not(found.record), flow_id)
        try:
            plan = self._k.plan_for(found.record)
        except UnknownFlow as exc:
            return CallbackAnswer(Completion.IGNORED, str(exc), flow_id)
        # Waiting: the step's run has committed and it awaits the token (else: keep it).
        waiting = self._k.kinds.waits(found.record.tracks[track].position.kind)
        if "error" not in completion:
            step = found.record.tracks[track].position.step
            completion = {**completion, "output": self._stored(completion, found.record, step)}

        def apply(latest: FlowRecord) -> FlowRecord | None:
            at = track_with(latest, token) if latest.status in ACTIVE else None
            if at is None or (not waiting and latest.tracks[at].early is not None):
                return None
            current = latest.focused(at)
            return fitting(plan, current, signal(plan, current, completion))

        if self._k.write(found, apply) is Ran.STALE:
            latest = self._k.store.get(key)
            why = self._why_not(latest) if latest else "the flow is gone"
            return CallbackAnswer(Completion.IGNORED, why, flow_id)
        return CallbackAnswer(Completion.COMPLETED if waiting else Completion.KEPT, "", flow_id)

    def _stored(self, completion: dict[str, Any], record: FlowRecord, step: str) -> dict[str, Any]:
        """A completion's output as the flow stores it (step ``step``'s output: sealed,
        offloaded if large), or InvalidMessage saying why it cannot be stored
        (PayloadUnavailable: the bucket is down, the caller tries again)."""
        where = "the callback's output"
        output = completion.get("output", {})
        checked = completed(output, where=where, max_bytes=self._k.sizes.output_bytes)
        if isinstance(checked, Failed):
            raise InvalidMessage(checked.error.message)
        stored = self._k.stored(output or {}, record, step=step, where=where, checked=True)
        if isinstance(stored, Retry):
            raise stored.error
        assert isinstance(stored, Completed)
        return stored.output

    def _why_not(self, record: FlowRecord) -> str:
        """Why no step awaits a token of ``record`` (for a ForEach lane: of its flow)."""
        if record.is_lane and record.parent is not None:
            parent = self._k.store.get(record.parent)
            if parent is not None and parent.status in TERMINAL:
                return not_awaited(parent)
            if record.status is Status.SUCCEEDED:
                return "no step awaits this token: its item is done (completed already)"
        return not_awaited(record)


def track_with(record: FlowRecord, token: str) -> str | None:
    """The track awaiting ``token``: compared in constant time, so how long a wrong guess
    takes says nothing of how much of it was right."""
    given = token.encode("utf-8", "surrogatepass")
    found = None
    for key, track in record.tracks.items():
        if track.token is not None and hmac.compare_digest(track.token.encode("utf-8"), given):
            found = key
    return found


def not_awaited(record: FlowRecord) -> str:
    """Why no step of ``record`` awaits a token that names it."""
    if record.status in TERMINAL:
        late = record.result is not None and record.result.code == "CALLBACK_TIMEOUT"
        return (
            f"the flow has ended ({record.status}){': the callback came too late' if late else ''}"
        )
    if record.status is Status.COMPENSATING:
        return "the flow is being undone; it awaits no callback"
    return "no step awaits this token: it was completed already, or belongs to an earlier run"
