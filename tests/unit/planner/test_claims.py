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
