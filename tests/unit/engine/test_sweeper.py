"""engine against in-memory ports: the sweeper: lost tasks rescued, the grace period kept, a
result that never went out published, a flow of a type not deployed set aside."""

from __future__ import annotations

from datetime import timedelta

import pytest

from relayflow.core.engine import Ran
from relayflow.core.errors import PermanentError

from .support import Harness


def test_sweep_rescues_a_lost_task_and_leaves_a_queued_one(h: Harness) -> None:
    # given two flows due now, one of whose tasks has vanished from the queue
    h.start(message_id="lost")
    h.start(message_id="kept")
    lost, kept = h.record("lost"), h.record("kept")
    assert lost.next is not None and kept.next is not None
    h.queue.lose(lost.next.task_id)
    kept_doc = dict(h.store.docs["kept"])
    # when the sweeper runs two minutes later with a one-minute grace
    h.clock.advance(120)
    report = h.engine.sweep(grace_s=60)
    # then the lost one is re-enqueued under a new name, due now; the queued one keeps its
    # task and is set aside (the sweep's view of when it is due moves on), so it does not
    # head the next sweep's query
    assert (report.overdue, report.rescued, report.still_queued) == (2, 1, 1)
    rescued = h.record("lost")
    assert rescued.position.rescue == 1
    assert rescued.next is not None
    assert rescued.next.task_id != lost.next.task_id
    assert rescued.next.run_at == h.clock.now()
    assert h.queue.exists(rescued.next)
    set_aside = h.store.docs["kept"]
    assert set_aside["next_run_at"] == h.clock.now() + timedelta(minutes=10)
    unchanged = {"next_run_at": kept_doc["next_run_at"], "aside_until": None}
    assert {**set_aside, **unchanged} == kept_doc
    # and the rescued task runs the step
    assert h.deliver("lost") is Ran.ADVANCED
    assert len(h.reserve.calls) == 1


def test_sweep_ignores_flows_within_the_grace_period(h: Harness) -> None:
    h.start()
    record = h.record()
    assert record.next is not None
    h.queue.lose(record.next.task_id)
    h.clock.advance(30)
    report = h.engine.sweep(grace_s=60)
    assert (report.overdue, report.rescued) == (0, 0)


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
