"""relayflow.core.planner.claims: a delivery holds the step it runs for a lease (invariant 4);
an action's effect is noted as begun in the same write; a claim left by a delivery that never
committed counts as a try, so a step that keeps crashing is bounded.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core import planner
from relayflow.core.planner import Completed
from relayflow.core.records import CLEANUP_TRACK, Cleanup, EffectState, FlowRecord
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, RETRY, at_poll, plan, started

LEASE_S = 150.0


def claimed(record: FlowRecord, holder: str = "d-1", at: timedelta = timedelta(0)) -> FlowRecord:
    return planner.claim(plan(NOW + at), record, lease_s=LEASE_S, holder=holder)


def test_a_claim_holds_the_step_for_its_lease_and_notes_the_actions_effect_begun() -> None:
    record = claimed(started())
    assert record.claim is not None
    assert (record.claim.holder, record.claim.position) == ("d-1", record.position)
    assert record.claim.until == NOW + timedelta(seconds=LEASE_S)
    assert [(e.step, e.state) for e in record.effects] == [("reserve", EffectState.UNKNOWN)]
    assert record.uncommitted == 0
    assert record.tracks["reserve"].claim == record.claim  # stored in its track


def test_a_claim_that_is_not_an_actions_notes_no_effect() -> None:
    polling = at_poll()
    assert claimed(polling).effects == polling.effects


def test_a_claim_is_live_until_its_lease_ends_or_it_is_released() -> None:
    record = claimed(started())
    assert planner.is_claimed(plan(), record)
    assert planner.is_claimed(plan(NOW + timedelta(seconds=LEASE_S - 1)), record)
    assert not planner.is_claimed(plan(NOW + timedelta(seconds=LEASE_S)), record)
    released = planner.release(record, "d-1")
    assert released is not None and not planner.is_claimed(plan(), released)
    assert not planner.is_claimed(plan(), started())


def test_a_claim_of_another_try_does_not_hold_this_one() -> None:
    record = claimed(started())
    retried = record.model_copy(
        update={"position": record.position.model_copy(update={"attempt": 1})}
    )
    assert not planner.is_claimed(plan(), retried)


def test_only_its_holder_holds_a_claim_or_gives_it_up() -> None:
    record = claimed(started(), holder="d-1")
    assert planner.holds(record, "d-1") and not planner.holds(record, "d-2")
    assert planner.release(record, "d-2") is None
    released = planner.release(record, "d-1")
    assert released is not None and released.claim is not None and released.claim.released
    assert planner.release(released, "d-1") is None  # given up once
    assert not planner.holds(started(), "d-1")


def test_a_claim_left_by_a_delivery_that_never_committed_counts_as_a_try() -> None:
    # given a delivery that claimed the step and died, and another after the lease
    first = claimed(started(), holder="d-1")
    second = claimed(first, holder="d-2", at=timedelta(seconds=LEASE_S))
    assert second.uncommitted == 1 and planner.holds(second, "d-2")
    assert len(second.effects) == 1  # the same effect: its call may have been made


def test_a_step_is_exhausted_once_its_tries_and_uncommitted_deliveries_reach_its_limit() -> None:
    record = started()
    assert not planner.exhausted(plan(), record)
    for n in range(1, RETRY.max_attempts + 1):
        record = claimed(record, holder=f"d-{n}", at=timedelta(seconds=n * LEASE_S))
    assert record.uncommitted == RETRY.max_attempts - 1
    assert not planner.exhausted(plan(), record)
    later = record.model_copy(
        update={"position": record.position.model_copy(update={"attempt": 1})}
    )
    assert planner.exhausted(plan(), later)  # 1 committed try + 2 that never committed


def test_a_poll_is_never_exhausted_by_claims() -> None:
    polling = at_poll().model_copy(update={"uncommitted": 99})
    assert not planner.exhausted(plan(), polling)


def test_a_clean_ups_crashes_are_bounded_by_its_window_not_its_tries() -> None:
    ended = planner.after(plan(), started(), Completed({})).model_copy(
        update={"status": Status.FAILED}
    )
    window = Cleanup(since=NOW, until=NOW + timedelta(hours=1))
    undo = ended.model_copy(update={"cleanup": window, "focus": CLEANUP_TRACK, "uncommitted": 50})
    assert not planner.exhausted(plan(), undo)
    assert planner.exhausted(plan(NOW + timedelta(hours=1)), undo)
    assert not planner.exhausted(
        plan(NOW + timedelta(hours=1)), undo.model_copy(update={"uncommitted": 0})
    )


FIRST_LEASE_S = 180.0


def first_claimed(**kw: object) -> FlowRecord:
    return planner.new_record(
        plan(), flow_id="acme-1", input={}, message_id="m-1", deadline_s=None,
        first_lease_s=FIRST_LEASE_S, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_create_claims_the_first_step_for_its_tasks_first_dispatch() -> None:
    record = first_claimed()
    held = record.claim
    assert held is not None and held.first and not held.released
    assert record.next is not None
    assert held.position == record.position == record.next.position
    assert held.holder == f"first:{record.next.task_id}"  # exactly that task
    assert held.until == NOW + timedelta(seconds=FIRST_LEASE_S)
    # the effect is noted as begun, as the delivery's claim would have noted it
    assert [(e.step, e.state) for e in record.effects] == [("reserve", EffectState.UNKNOWN)]
    assert record.tracks["reserve"].claim == held  # stored in its track
    assert planner.is_claimed(plan(), record)


def test_without_a_first_lease_or_with_no_room_the_create_claims_nothing() -> None:
    assert started().claim is None and started().effects == []
    waiting = first_claimed(waiting=True)
    assert waiting.claim is None and waiting.tracks == {}


def test_a_first_dispatch_runs_under_its_claim_only_while_it_covers_a_whole_lease() -> None:
    record = first_claimed()
    within = FIRST_LEASE_S - LEASE_S
    assert planner.first_dispatch(plan(), record, lease_s=LEASE_S)
    assert planner.first_dispatch(plan(NOW + timedelta(seconds=within)), record, lease_s=LEASE_S)
    late = plan(NOW + timedelta(seconds=within + 1))
    assert not planner.first_dispatch(late, record, lease_s=LEASE_S)
    released = planner.release(record, record.claim.holder if record.claim else "")
    assert released is not None and not planner.first_dispatch(plan(), released, lease_s=LEASE_S)
    put_off = record.model_copy(
        update={"position": record.position.model_copy(update={"deferral": 1})}
    )
    assert not planner.first_dispatch(plan(), put_off, lease_s=LEASE_S)
    assert not planner.is_claimed(plan(), put_off)  # a first claim holds its own task only


def test_a_redelivery_counts_the_first_dispatch_it_retries_as_a_try() -> None:
    record = first_claimed()
    retry = planner.claim(plan(), record, lease_s=LEASE_S, holder="d-2", redelivery=True)
    assert retry.uncommitted == 1
    assert retry.claim is not None and not retry.claim.first
    assert len(retry.effects) == 1  # the effect begun by the create, not a second one


def test_a_late_first_dispatch_takes_the_claim_over_without_counting_a_try() -> None:
    record = first_claimed()
    late = planner.claim(plan(), record, lease_s=LEASE_S, holder="d-2", redelivery=False)
    assert late.uncommitted == 0


def test_a_rescued_task_counts_the_first_claim_its_lost_twin_may_have_run_under() -> None:
    record = first_claimed()
    rescued = record.model_copy(
        update={"position": record.position.model_copy(update={"rescue": 1})}
    )
    assert (
        planner.claim(plan(), rescued, lease_s=LEASE_S, holder="d-2", redelivery=False).uncommitted
        == 1
    )


def test_putting_the_first_step_off_ends_its_first_claim() -> None:
    record = first_claimed()
    later = NOW + timedelta(seconds=30)
    put_off = planner.defer(plan(), record, until=later, why="its breaker is open")
    assert put_off.claim is None
    assert put_off.position.deferral == 1
