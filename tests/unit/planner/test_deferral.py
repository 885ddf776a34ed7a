"""relayflow.core.planner.deferral: a task put off (its tenant paused, its dependency's breaker
open, its retry budget spent) gets a new task under a new name and spends no try — unless the
step could not run before its deadline, which times the flow out now; an undo is never timed
out, and one whose dependency is down is handed to the flow's clean-up.

The flow under test is ``tests.unit.planner.sample``'s (see there): its poll stops 900 s after
it began.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from relayflow.core import planner
from relayflow.core.planner.deferral import deadline_of
from relayflow.core.position import TaskKind
from relayflow.core.records import CLEANUP_TRACK, CleanupState, FlowRecord
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, at_poll, plan, started

WHY = "client-api's breaker is open"


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def undoing() -> FlowRecord:
    """The sample flow cancelled while polling: undoing ``reserve``."""
    cancelling = planner.cancel(plan(), at_poll(), "operator said so")
    assert cancelling.position.kind is TaskKind.COMPENSATE
    return cancelling


def test_a_put_off_task_is_a_new_task_then_and_spends_no_try() -> None:
    record = started()
    assert record.next is not None
    deferred = planner.defer(plan(), record, until=later(30), why=WHY)
    assert deferred.status is record.status
    assert (deferred.position.deferral, deferred.position.attempt) == (1, 0)
    assert deferred.next is not None and deferred.next.run_at == later(30)
    assert deferred.next.task_id != record.next.task_id  # the old name is spent
    assert (deferred.attempts, deferred.polls) == (record.attempts, record.polls)
    entry = deferred.history[-1]
    assert (entry.outcome, entry.detail, entry.delay_s) == ("deferred", WHY, 30.0)
    again = planner.defer(plan(later(30)), deferred, until=later(60), why=WHY)
    assert again.position.deferral == 2


def test_a_step_put_off_past_the_flows_deadline_times_the_flow_out_now() -> None:
    record = started(deadline_s=60)
    ended = planner.defer(plan(), record, until=later(61), why="its tenant is paused")
    assert ended.status is Status.TIMED_OUT
    assert ended.result is not None and ended.result.code == "DEADLINE_EXCEEDED"
    assert ended.result.message == "the deadline passes while its tenant is paused"
    assert planner.defer(plan(), record, until=later(60), why=WHY).status is Status.PENDING


def test_a_poll_put_off_past_its_own_deadline_times_out_and_undoes_what_ran() -> None:
    timed_out = planner.defer(plan(), at_poll(), until=later(901), why=WHY)
    assert timed_out.status is Status.COMPENSATING  # reserve is undone first
    assert timed_out.pending_result is not None
    assert (timed_out.pending_result.status, timed_out.pending_result.code) == (
        Status.TIMED_OUT,
        "DEADLINE_EXCEEDED",
    )


def test_an_undo_is_put_off_whatever_the_deadline() -> None:
    record = undoing().model_copy(update={"deadline_at": later(10)})
    deferred = planner.defer(replace(plan(), undo_window_s=0), record, until=later(3600), why=WHY)
    assert deferred.status is Status.COMPENSATING
    assert deferred.position.deferral == 1
    assert deferred.next is not None and deferred.next.run_at == later(3600)


def test_an_undo_whose_dependency_is_down_is_handed_to_the_clean_up_and_the_flow_ends() -> None:
    ended = planner.defer(plan(), undoing(), until=later(30), why=WHY, hand_over=True)
    assert ended.status is Status.CANCELLED  # the result it was undoing towards, now
    assert ended.cleanup is not None and ended.cleanup.state is CleanupState.PENDING
    assert ended.cleanup.until == NOW + timedelta(seconds=plan().undo_window_s)
    track = ended.tracks[CLEANUP_TRACK]
    assert track.next is not None and track.next.run_at == later(30)
    assert track.position.deferral == 1
    assert ended.history[-1].outcome == "clean-up pending"


def test_without_a_clean_up_window_an_undo_is_put_off_not_handed_over() -> None:
    no_window = replace(plan(), undo_window_s=0)
    deferred = planner.defer(no_window, undoing(), until=later(30), why=WHY, hand_over=True)
    assert deferred.status is Status.COMPENSATING and deferred.cleanup is None


def in_clean_up() -> FlowRecord:
    ended = planner.defer(plan(), undoing(), until=later(30), why=WHY, hand_over=True)
    return ended.focused(CLEANUP_TRACK)


def test_a_clean_ups_undo_is_put_off_at_most_to_the_end_of_its_window() -> None:
    record = in_clean_up()
    assert record.cleanup is not None
    deferred = planner.defer(
        plan(), record, until=record.cleanup.until + timedelta(days=1), why=WHY
    )
    assert deferred.next is not None and deferred.next.run_at == record.cleanup.until


def test_a_clean_ups_undo_put_off_once_its_window_closed_is_given_up() -> None:
    record = in_clean_up()
    assert record.cleanup is not None
    closed = plan(record.cleanup.until)
    given_up = planner.defer(
        closed, record, until=record.cleanup.until + timedelta(hours=1), why=WHY
    )
    assert given_up.cleanup is not None and given_up.cleanup.state is CleanupState.ABANDONED
    assert given_up.cleanup.left == ["reserve"]
    assert given_up.cleanup.reason == f"its undo window closed while {WHY}"


def test_the_latest_a_step_may_run_is_its_waits_deadline_or_the_flows() -> None:
    assert deadline_of(plan(), started()) == datetime.max.replace(tzinfo=UTC)
    assert deadline_of(plan(), started(deadline_s=60)) == later(60)
    polling = at_poll().focused("await_ready")
    assert deadline_of(plan(), polling) == later(900)
    assert deadline_of(plan(), at_poll(deadline_s=300).focused("await_ready")) == later(300)
