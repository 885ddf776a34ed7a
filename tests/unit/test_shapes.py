"""Flows that branch: steps after named steps run in parallel, a join waits for every branch,
an If runs one branch and skips the other; the saga undoes across branches, newest first.
Every shape runs through relayflow.testing's time-skipping harness."""

from __future__ import annotations

import pytest

from relayflow import (
    ActionStep,
    Flow,
    NotReady,
    PermanentError,
    PollPolicy,
    PollStep,
    StepContext,
)
from relayflow.core.flows import IfStep
from relayflow.core.state import Status
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=10.0, multiplier=1.0, max_interval_s=10.0, jitter=0.0)


def parallel() -> Flow:
    """reserve -> (charge || ship_label, which polls twice) -> notify."""

    def label_ready(ctx: StepContext) -> dict[str, bool]:
        if ctx.poll < 2:
            raise NotReady("printing")
        return {"label": True}

    return Flow(
        name="order",
        steps=(
            ActionStep("reserve", scripted({"r": 1}), compensate=scripted({})),
            ActionStep("charge", scripted({"c": 1}), compensate=scripted({}), after=("reserve",)),
            PollStep("ship_label", label_ready, policy=POLL, after=("reserve",)),
            ActionStep("notify", scripted({"n": 1}), after=("charge", "ship_label")),
        ),
    )


def test_steps_with_no_path_between_them_run_in_parallel_and_the_join_waits_for_both() -> None:
    h = Harness(parallel())
    flow_id = h.start("order")
    h.deliver_next(flow_id)  # reserve
    running = h.flow(flow_id).tracks
    assert set(running) == {"charge", "ship_label"}  # both started at once, a task each
    assert running["charge"].next is not None and running["ship_label"].next is not None
    assert running["charge"].next.run_at == running["ship_label"].next.run_at == h.now
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    order = [(c.step, c.kind) for c in h.calls]
    notify_at = order.index(("notify", "action"))
    assert order.index(("charge", "action")) < notify_at
    assert [i for i, c in enumerate(order) if c == ("ship_label", "poll")][-1] < notify_at
    # notify ran once, after the later of the two branches (the label's third poll, at 20 s)
    notify = [e for e in record.history if e.step == "notify"]
    label = [e for e in record.history if e.step == "ship_label"]
    assert len(notify) == 1 and notify[0].at >= label[-1].at
    assert record.result is not None and record.result.data == {"n": 1}


def test_a_failing_branch_undoes_done_work_across_branches_newest_first() -> None:
    h = Harness(parallel())
    h.script("notify", PermanentError("no address"))
    record = h.run(h.start("order"))
    assert record is not None and record.status is Status.FAILED
    undone = [c.step for c in h.calls if c.kind == "compensate"]
    assert undone == ["charge", "reserve"]  # charge completed after reserve: undone first


def test_a_failure_stops_the_other_running_branch() -> None:
    h = Harness(parallel())
    h.script("charge", PermanentError("declined"))
    flow_id = h.start("order")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.FAILED
    assert "notify" not in [c.step for c in h.calls]
    # the label poll that was waiting became stale: it never ran again after the failure
    failed_at = next(e.at for e in record.history if e.outcome == "failed")
    assert all(e.at <= failed_at for e in record.history if e.step == "ship_label")


def choice(amount: int) -> Flow:
    """check -> big? (manual_review -> approve) : (auto_approve) -> settle (after either)."""
    return Flow(
        name="payout",
        steps=(
            ActionStep("check", scripted({"amount": amount})),
            IfStep(
                "big",
                lambda ctx: ctx.outputs["check"]["amount"] > 1000,
                then=("manual_review", "approve"),
                otherwise=("auto_approve",),
            ),
            ActionStep("manual_review", scripted({"ok": True})),
            ActionStep("approve", scripted({"by": "human"}), after=("manual_review",)),
            ActionStep("auto_approve", scripted({"by": "rules"}), after=("big",)),
            ActionStep("settle", scripted({"settled": True}), after=("approve", "auto_approve")),
        ),
    )


@pytest.mark.parametrize(
    ("amount", "ran", "skipped"),
    [
        (5000, ["check", "manual_review", "approve", "settle"], ["auto_approve"]),
        (50, ["check", "auto_approve", "settle"], ["manual_review", "approve"]),
    ],
)
def test_an_if_runs_one_branch_and_records_the_other_as_skipped(
    amount: int, ran: list[str], skipped: list[str]
) -> None:
    h = Harness(choice(amount))
    record = h.run(h.start("payout"))
    assert record is not None and record.status is Status.SUCCEEDED
    assert [c.step for c in h.calls if c.kind == "action"] == ran
    assert sorted(record.skipped) == sorted(skipped)
    assert record.outputs["big"] == {"branch": "then" if amount > 1000 else "otherwise"}
    assert [e.outcome for e in record.history if e.step == "big"] == [
        f"chose {'then' if amount > 1000 else 'otherwise'}"
    ]


def test_every_task_delivered_twice_changes_nothing_in_a_branching_flow() -> None:
    h = Harness(parallel(), duplicate_deliveries=True)
    record = h.run(h.start("order"))
    assert record is not None and record.status is Status.SUCCEEDED
    actions = [c.step for c in h.calls if c.kind == "action"]
    assert sorted(actions) == ["charge", "notify", "reserve"]
    assert len(h.results()) == 1


def test_a_retry_of_a_failed_branching_flow_keeps_what_is_still_in_effect() -> None:
    h = Harness(parallel())
    h.script_undo("charge", PermanentError("refunds are down"))  # charge stays in effect
    h.script("notify", PermanentError("no address"), {"n": 2})
    flow_id = h.start("order")
    h.run(flow_id)
    h.retry(flow_id)
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    # generation 1 redid reserve (undone: a fresh key) and what ran after it; charge, whose
    # effect is still live, was called under its old key, so the API replays it: one charge
    charges = [
        c.context.idempotency_key for c in h.calls if (c.step, c.kind) == ("charge", "action")
    ]
    reserves = [
        c.context.idempotency_key for c in h.calls if (c.step, c.kind) == ("reserve", "action")
    ]
    assert len(charges) == 2 and charges[0] == charges[1]
    assert len(reserves) == 2 and reserves[0] != reserves[1]
