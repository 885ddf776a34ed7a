"""engine against in-memory ports: what a handler returns, and flows whose definition
changed or is not deployed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from relayflow.core.engine import Ran
from relayflow.core.errors import (
    PermanentError,
    UnknownFlow,
)
from relayflow.core.position import TaskPayload
from relayflow.core.state import Status

from .support import Harness


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (["not", "a", "dict"], "output of reserve is a list"),
        ({"when": datetime(2026, 1, 1)}, "output of reserve.when is a datetime"),
        ({"n": 2**70}, "output of reserve.n is an integer outside 64 bits"),
        ({"__name__": 1}, "reserved key '__name__'"),
        ({"x": float("nan")}, "output of reserve.x is nan"),
        ({"blob": "x" * 300_000}, "the limit is 262144"),
    ],
)
def test_an_output_the_flow_document_cannot_hold_fails_the_flow_once(
    h: Harness, output: Any, says: str
) -> None:
    # given a step handler whose output Firestore could not store
    h.reserve.script = [lambda ctx: output]
    h.start()
    # when its task runs, then the flow FAILS at once with the reason (no retry, no 5xx loop)
    assert h.deliver() is Ran.ADVANCED
    record = h.record()
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "INVALID_OUTPUT"
    assert says in record.result.message
    assert len(h.reserve.calls) == 1


def test_a_task_for_a_flow_this_service_does_not_know_is_retried(h: Harness) -> None:
    # given a flow started by a newer deployment, whose definition this instance lacks
    h.start()
    h.store.docs["1001"]["flow"] = "from-the-future"
    # when its task arrives, then it raises (a 5xx), so Cloud Tasks delivers it again later
    with pytest.raises(UnknownFlow):
        h.deliver()
    assert h.reserve.calls == []


def test_a_position_the_definition_no_longer_has_ends_the_flow(h: Harness) -> None:
    # given a flow whose current step was renamed by a deploy while it waited
    h.start()
    h.store.docs["1001"]["tracks"]["reserve"]["position"]["step"] = "reserve_v0"
    renamed = h.record().position
    # when its task runs, then the flow FAILS as DEFINITION_CHANGED instead of crashing forever
    assert h.engine.run_task(TaskPayload(flow_id="1001", position=renamed)) is Ran.ADVANCED
    record = h.record()
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "DEFINITION_CHANGED"
    assert h.reserve.calls == []


def test_sweep_publishes_a_result_that_never_went_out_and_sets_aside_an_unknown_type(
    h: Harness,
) -> None:
    # given a flow that ended while Pub/Sub was down (its event never went out) ...
    h.reserve.script = [PermanentError("no", code="NOPE")]
    h.start()
    h.events.failures_left = 1
    with pytest.raises(ConnectionError):
        h.deliver()
    assert h.record().result_published is False
    # ... and a flow whose definition is gone, overdue
    h.start(message_id="orphan")
    h.store.docs["orphan"]["flow"] = "gone"
    h.queue.lose(h.record("orphan").next.task_id)  # type: ignore[union-attr]
    # when the sweeper runs later
    h.clock.advance(600)
    report = h.engine.sweep(grace_s=60)
    # then the missing event is published once, and the flow of an unknown type is set aside
    # (a rolling deploy may still bring its type back)
    assert (report.errors, report.unpublished, report.republished) == (0, 1, 1)
    assert h.store.docs["orphan"]["next_run_at"] == h.clock.now() + timedelta(minutes=10)
    assert [e["code"] for e in h.events.published] == ["NOPE"]
    assert h.record().result_published is True


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
