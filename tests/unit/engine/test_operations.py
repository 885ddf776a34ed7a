"""engine against in-memory ports: operators' cancel and retry (which publishes the ended
generation's result first)."""

from __future__ import annotations

import pytest

from relayflow.core.engine import Limits, Ran
from relayflow.core.errors import (
    FlowNotFound,
    InvalidTransition,
    PermanentError,
)
from relayflow.core.state import Status

from .support import INCARNATION, Harness

# How long after a flow's create the first claim it took for its first step lasts.
PAST_FIRST_CLAIM_S = Limits().claim_lease_s + Limits().first_delivery_within_s + 1


def test_cancel_ends_the_flow_and_its_pending_task_becomes_stale(h: Harness) -> None:
    h.start()
    pending = h.queue.only()  # reserve's task, claimed by the create for its first dispatch
    # while that dispatch may be running under the claim, cancel is refused, as for any claim
    with pytest.raises(InvalidTransition, match="is running"):
        h.engine.cancel("1001", "no longer needed")
    h.clock.advance(PAST_FIRST_CLAIM_S)
    cancelled = h.engine.cancel("1001", "no longer needed")
    # that dispatch may have died mid-call, so reserve is undone first (undos tolerate "gone")
    assert cancelled.status is Status.COMPENSATING
    assert h.engine.run_task(h.queue.take(pending.next.task_id)) is Ran.STALE
    assert h.deliver() is Ran.ADVANCED  # the undo
    assert h.record().status is Status.CANCELLED
    assert [e["message"] for e in h.events.published] == ["no longer needed"]
    assert h.reserve.calls == []
    assert len(h.release.calls) == 1
    with pytest.raises(InvalidTransition):
        h.engine.cancel("1001")


def test_retry_runs_a_failed_flow_again_as_a_new_generation(h: Harness) -> None:
    h.reserve.script = [PermanentError("nope"), {"reservation": "r-2"}]
    h.start()
    h.deliver()
    assert h.record().status is Status.FAILED
    again = h.engine.retry("1001")
    assert again.status is Status.PENDING
    assert again.position.generation == 1
    assert h.queue.only().next == again.next
    assert h.deliver() is Ran.ADVANCED
    # the first call was refused: the new generation calls again under a fresh key
    assert h.reserve.calls[-1].idempotency_key == f"relayflow-1001-{INCARNATION}-reserve-e1"


def test_operating_on_a_missing_flow_is_flow_not_found(h: Harness) -> None:
    with pytest.raises(FlowNotFound):
        h.engine.cancel("nobody")
    with pytest.raises(FlowNotFound):
        h.engine.get("nobody")


def test_a_retry_publishes_the_ended_generation_first_and_then_its_own(h: Harness) -> None:
    # given generation 0 failed and an operator retried it before its mark landed
    h.reserve.script = [PermanentError("no"), {"reservation": "r-2"}]
    h.start()
    h.events.failures_left = 1
    with pytest.raises(ConnectionError):
        h.deliver()  # generation 0 FAILED, its event not yet out
    h.engine.retry("1001")  # publishes generation 0's event, then starts generation 1
    assert h.store.mark_published("1001", generation=0) is False
    # when generation 1 runs to the end
    h.await_ready.script = [{"state": "READY"}]
    while h.record().status not in {Status.SUCCEEDED, Status.FAILED}:
        h.deliver()
    # then both generations' events went out, in order
    assert [e["generation"] for e in h.events.published] == [0, 1]
