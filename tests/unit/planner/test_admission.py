"""relayflow.core.planner.admission: a flow waiting for its tenant's room holds no task but the
one that tries for a slot again once a slot has rested; admitted, its first steps are due.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core import planner
from relayflow.core.position import TaskKind
from relayflow.core.records import ADMIT_TRACK, FlowRecord
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, plan, started


def waiting() -> FlowRecord:
    return planner.new_record(
        plan(), flow_id="acme-1", input={}, message_id="m-1", deadline_s=None, tenant="acme",
        waiting=True,
    )  # fmt: skip


def test_a_waiting_flow_holds_no_task() -> None:
    record = waiting()
    assert (record.admission, record.queued_at, record.status) == ("waiting", NOW, Status.PENDING)
    assert record.tracks == {} and record.next is None


def test_an_admitted_flow_holds_its_slot_and_its_first_steps_are_due_now() -> None:
    later = NOW + timedelta(seconds=30)
    admitted = planner.admitted(plan(later), waiting(), slot="acme.3")
    assert admitted is not None
    assert (admitted.admission, admitted.slot) == ("admitted", "acme.3")
    assert list(admitted.tracks) == ["reserve"]
    assert admitted.next is not None and admitted.next.run_at == later
    entry = admitted.history[-1]
    assert (entry.outcome, entry.detail, entry.at) == ("admitted", "slot acme.3", later)
    assert admitted.attempts == 0  # admission is not a try


def test_a_flow_no_longer_waiting_is_not_admitted_again() -> None:
    admitted = planner.admitted(plan(), waiting(), slot=None)
    assert admitted is not None and admitted.history[-1].detail == ""
    assert planner.admitted(plan(), admitted, slot="acme.1") is None
    cancelled = waiting().model_copy(update={"status": Status.CANCELLED})
    assert planner.admitted(plan(), cancelled, slot="acme.1") is None
    assert planner.admitted(plan(), started(), slot="acme.1") is None


def test_a_waiting_flow_tries_for_a_slot_again_when_one_has_rested() -> None:
    free_at = NOW + timedelta(seconds=2)
    retrying = planner.await_admission(plan(), waiting(), at=free_at)
    assert retrying is not None and list(retrying.tracks) == [ADMIT_TRACK]
    nxt = retrying.tracks[ADMIT_TRACK].next
    assert nxt is not None and nxt.run_at == free_at
    assert nxt.position.kind is TaskKind.ADMIT and nxt.queue == "q-steps"
    assert retrying.next_run_at == free_at  # the sweeper sees it
    assert planner.await_admission(plan(), retrying, at=free_at) is None  # it has that task


def test_a_slot_free_already_is_tried_for_now() -> None:
    retrying = planner.await_admission(plan(), waiting(), at=NOW - timedelta(seconds=5))
    assert retrying is not None
    nxt = retrying.tracks[ADMIT_TRACK].next
    assert nxt is not None and nxt.run_at == NOW


def test_a_flow_not_waiting_has_no_slot_retry() -> None:
    assert planner.await_admission(plan(), started(), at=NOW) is None


def test_a_slot_retry_that_ran_leaves_the_flow_waiting_without_it() -> None:
    retrying = planner.await_admission(plan(), waiting(), at=NOW)
    assert retrying is not None
    tried = planner.admission_tried(retrying.focused(ADMIT_TRACK))
    assert tried.tracks == {} and tried.admission == "waiting"
    assert tried.next_run_at is None
