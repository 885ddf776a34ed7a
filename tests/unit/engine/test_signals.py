"""relayflow.core.engine.signals: what sending a signal answers — twice under one id (a
duplicate), for an ended or unknown flow, a name nothing waits for, a step already done; data
refused naming why; the pending and remembered-id bounds; a ForEach item's signal routed to
its lane. Through relayflow.testing's harness. (The step: ``tests/unit/kinds/test_signal.py``.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from relayflow import ActionStep, Flow, WaitForSignal
from relayflow.core.engine import Signalled
from relayflow.core.engine.signals import SignalTooLarge
from relayflow.core.errors import InvalidMessage
from relayflow.core.flows import ForEach
from relayflow.core.kinds.signal import MAX_PENDING, MAX_SIGNAL_BYTES, MAX_SIGNAL_IDS
from relayflow.core.state import Status
from relayflow.testing import START, Harness
from tests.unit.kinds.test_signal import _forget as _forget_shipments
from tests.unit.kinds.test_signal import approval, noop, shipped

# The approval flow and its recorded shipments are the step's tests' (one definition);
# their fixture empties the record before each test here too.
_forget = _forget_shipments


def test_the_same_signal_id_twice_is_a_duplicate_that_changes_nothing() -> None:
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")
    h.run_until(START)
    assert h.signal(flow_id, "approve", signal_id="s-1").outcome is Signalled.DELIVERED
    after_first = h.flow(flow_id)

    again = h.signal(flow_id, "approve", signal_id="s-1")
    early = h.start("approval", flow_id="o-2")
    kept = h.signal(early, "approve", signal_id="s-2")
    resent = h.signal(early, "approve", signal_id="s-2")

    assert again.outcome is Signalled.DUPLICATE and "s-1" in again.reason
    assert h.flow(flow_id) == after_first
    assert kept.outcome is Signalled.KEPT and resent.outcome is Signalled.DUPLICATE
    assert len(h.flow(early).signals) == 1
    h.run()
    assert len(shipped) == 2  # each flow shipped once


def test_a_signal_resent_under_its_id_after_it_ended_the_flow_is_a_duplicate() -> None:
    # given a flow a signal ended (the sender lost the answer)
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")
    h.run_until(START)
    assert h.signal(flow_id, "approve", signal_id="s-1").outcome is Signalled.DELIVERED
    ended = h.run(flow_id)
    assert ended is not None and ended.status is Status.SUCCEEDED

    # when the sender sends it again under its id, and another signal comes
    resent = h.signal(flow_id, "approve", signal_id="s-1")
    other = h.signal(flow_id, "approve", signal_id="s-2")

    # then the resend hears its signal was taken; the new one, that the flow has ended
    assert resent.outcome is Signalled.DUPLICATE and "s-1" in resent.reason
    assert other.outcome is Signalled.IGNORED and other.code == "FLOW_ENDED"
    assert h.flow(flow_id) == ended
    assert len(shipped) == 1


def test_a_signal_for_an_ended_flow_an_unknown_flow_or_an_unknown_name_changes_nothing() -> None:
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")
    h.run_until(START)
    h.signal(flow_id, "approve")
    h.run(flow_id)
    ended = h.flow(flow_id)

    late = h.signal(flow_id, "approve", signal_id="late")
    nobody = h.signal("o-404", "approve")
    running = h.start("approval", flow_id="o-2")
    unknown = h.signal(running, "cancel-order")

    assert (late.outcome, late.code) == (Signalled.IGNORED, "FLOW_ENDED")
    assert "SUCCEEDED" in late.reason
    assert h.flow(flow_id) == ended
    assert (nobody.outcome, nobody.code) == (Signalled.IGNORED, "FLOW_NOT_FOUND")
    assert (unknown.outcome, unknown.code) == (Signalled.IGNORED, "UNKNOWN_SIGNAL")
    assert "approve, reject" in unknown.reason  # what it does wait for
    assert h.flow(running).signals == []


def test_a_signal_after_its_step_is_done_is_not_kept() -> None:
    h = Harness(
        Flow(
            name="twice",
            steps=(WaitForSignal("approval", signal="approve"), ActionStep("later", noop)),
        )
    )
    flow_id = h.start("twice", flow_id="t-1")
    h.run_until(START)
    h.signal(flow_id, "approve")
    answer = h.signal(flow_id, "approve")  # the flow is still running (its next step is due)
    assert (answer.outcome, answer.code) == (Signalled.IGNORED, "NOT_AWAITED")
    assert h.flow(flow_id).signals == []


def test_data_that_firestore_cannot_store_or_is_too_large_is_refused_naming_why() -> None:
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")
    with pytest.raises(InvalidMessage, match="JSON object"):
        h.signal(flow_id, "approve", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="reserved key"):
        h.signal(flow_id, "approve", {"__name__": 1})
    with pytest.raises(InvalidMessage, match=r"NaN|finite|nan"):
        h.signal(flow_id, "approve", {"x": float("nan")})
    with pytest.raises(SignalTooLarge, match=f"limit is {MAX_SIGNAL_BYTES}"):
        h.signal(flow_id, "approve", {"x": "a" * MAX_SIGNAL_BYTES})
    with pytest.raises(InvalidMessage, match="name must match"):
        h.signal(flow_id, "Approve!")
    with pytest.raises(InvalidMessage, match="signal id"):
        h.signal(flow_id, "approve", signal_id="has space")
    assert h.flow(flow_id).signals == []


def test_at_most_max_pending_signals_are_kept_and_the_next_is_refused() -> None:
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")
    for n in range(MAX_PENDING):
        assert h.signal(flow_id, "approve", {"n": n}).outcome is Signalled.KEPT
    over = h.signal(flow_id, "approve", {"n": MAX_PENDING})
    assert (over.outcome, over.code) == (Signalled.IGNORED, "TOO_MANY_PENDING")
    assert len(h.flow(flow_id).signals) == MAX_PENDING
    record = h.run(flow_id)
    assert record is not None and record.outputs["approval"]["data"] == {"n": 0}  # the oldest


def test_remembered_signal_ids_are_bounded() -> None:
    h = Harness(Flow(name="one", steps=(WaitForSignal("gate", signal="go"),)))
    ids: list[str] = []
    for n in range(MAX_SIGNAL_IDS + 5):
        flow_id = h.start("one", flow_id=f"g-{n}")
        h.signal(flow_id, "go", signal_id=f"id-{n}")
        ids = h.flow(flow_id).signal_ids
    assert len(ids) <= MAX_SIGNAL_IDS


def test_a_signal_step_in_a_foreach_item_takes_signals_for_its_item() -> None:
    each = ForEach(
        "each",
        items=lambda ctx: ["a", "b", "c"],
        steps=(ActionStep("prepare", noop), WaitForSignal("ok", signal="approve", timeout_s=600)),
        concurrency=2,
    )
    h = Harness(Flow(name="items", steps=(ActionStep("first", noop), each)))
    flow_id = h.start("items", flow_id="i-1")

    not_yet = h.signal(flow_id, "approve", item=0)
    no_item = h.signal(flow_id, "approve")
    assert (not_yet.code, no_item.code) == ("NOT_STARTED", "ITEM_NEEDED")

    h.run_until(START)  # the ForEach started; items 0 and 1 wait, item 2 comes after 0
    answers = [h.signal(flow_id, "approve", {"i": i}, item=i, by="dana") for i in (2, 0, 1)]
    assert [a.outcome for a in answers] == [Signalled.KEPT, Signalled.DELIVERED] * 1 + [
        Signalled.DELIVERED
    ]
    missing = h.signal(flow_id, "approve", item=7)
    assert missing.code == "NOT_AWAITED"
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    items = record.outputs["each"]["items"]
    assert [item["data"] for item in items] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert h.signal(flow_id, "approve", item=0).code == "FLOW_ENDED"


def test_a_retried_foreachs_items_take_signals_in_their_new_lanes() -> None:
    # given a ForEach whose items wait for approval, the flow cancelled while they waited
    each = ForEach(
        "each",
        items=lambda ctx: ["a", "b"],
        steps=(WaitForSignal("ok", signal="approve", timeout_s=600),),
        concurrency=2,
    )
    h = Harness(Flow(name="items", steps=(each,)))
    flow_id = h.start("items", flow_id="i-2")
    h.run_until(START)
    h.cancel(flow_id, "wrong batch")
    assert h.run(flow_id).status is Status.CANCELLED  # type: ignore[union-attr]

    # when it is retried, then a signal for an item reaches that item's lane of generation 1
    h.retry(flow_id)
    h.run_until(h.now + timedelta(seconds=5))
    assert all(lane.endswith(".g1") for lane in h.flow(flow_id).lanes)
    answers = [h.signal(flow_id, "approve", {"i": i}, item=i) for i in (0, 1)]
    assert [a.outcome for a in answers] == [Signalled.DELIVERED, Signalled.DELIVERED]
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert [item["data"] for item in record.outputs["each"]["items"]] == [{"i": 0}, {"i": 1}]
