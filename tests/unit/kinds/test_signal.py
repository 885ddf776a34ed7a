"""WaitForSignal steps through relayflow.testing's time-skipping harness: a signal before the
wait and after it, a timeout that fails or goes on, one past 30 days chained, a wait with no
timeout holding no task, the flow's deadline, cancel, a signal step in a branch. (What sending
answers: ``tests/unit/engine/test_signals.py``.)"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from relayflow import ActionStep, Flow, IfStep, StepContext, WaitForSignal
from relayflow.core.engine import Signalled
from relayflow.core.errors import ConfigError
from relayflow.core.kinds import REGISTRY
from relayflow.core.position import TaskKind
from relayflow.core.state import Status
from relayflow.testing import START, Harness

shipped: list[dict[str, Any]] = []


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def ship(ctx: StepContext) -> dict[str, Any]:
    shipped.append(ctx.outputs["approval"])
    return {"shipped": ctx.outputs["approval"]["signal"] == "approve"}


@pytest.fixture(autouse=True)
def _forget() -> None:
    shipped.clear()


def approval(timeout_s: float | None = 3600, on_timeout: str = "fail") -> Flow:
    return Flow(
        name="approval",
        steps=(
            ActionStep("order", noop),
            WaitForSignal(
                "approval", signal=("approve", "reject"), timeout_s=timeout_s, on_timeout=on_timeout
            ),
            ActionStep("ship", ship),
        ),
    )


def test_a_signal_after_the_wait_begins_ends_it_and_its_output_is_the_signal() -> None:
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")
    began = time.perf_counter()
    h.run_until(START)
    waiting = h.flow(flow_id)
    assert waiting.status is Status.RUNNING
    task = h.queue.only(flow_id)  # the one task the wait holds: its timeout
    assert task.next.position.kind is TaskKind.SIGNAL
    assert task.next.run_at == START + timedelta(hours=1)

    answer = h.signal(flow_id, "approve", {"note": "ok"}, by="alice@x", reason="looks right")

    assert answer.outcome is Signalled.DELIVERED
    record = h.run(flow_id)
    assert time.perf_counter() - began < 1.0
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["approval"] == {
        "signal": "approve",
        "data": {"note": "ok"},
        "by": "alice@x",
        "reason": "looks right",
        "signal_id": None,
        "at": START.isoformat(),
    }
    assert record.result is not None and record.result.data == {"shipped": True}
    taken = next(e for e in record.history if e.outcome == "signal approve")
    assert (taken.by, taken.detail) == ("alice@x", "looks right")
    assert h.path(flow_id) == [
        "order action #0: succeeded",
        "approval signal #0: waiting for signal approve or reject",
        "approval signal #0: signal approve",
        "ship action #0: succeeded",
    ]


def test_a_signal_before_the_flow_reaches_the_step_is_kept_and_consumed_there() -> None:
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")

    answer = h.signal(flow_id, "reject", {"why": "fraud"}, signal_id="s-1", by="bob")

    assert answer.outcome is Signalled.KEPT
    kept = h.flow(flow_id)
    assert [(s.name, s.data, s.signal_id) for s in kept.signals] == [
        ("reject", {"why": "fraud"}, "s-1")
    ]
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["approval"]["signal"] == "reject"
    assert record.result is not None and record.result.data == {"shipped": False}
    assert record.signals == [] and record.signal_ids == ["s-1"]
    assert "approval signal #0: waiting for signal approve or reject" not in h.path(flow_id)


def test_a_timeout_with_no_signal_times_the_flow_out() -> None:
    h = Harness(approval(timeout_s=7200))
    flow_id = h.start("approval", flow_id="o-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "SIGNAL_TIMEOUT"
    assert "approve or reject" in record.result.message
    assert record.finished_at == START + timedelta(hours=2)
    late = h.signal(flow_id, "approve")
    assert late.code == "FLOW_ENDED" and shipped == []


def test_on_timeout_continue_goes_on_with_no_signal() -> None:
    h = Harness(approval(timeout_s=60, on_timeout="continue"))
    flow_id = h.start("approval", flow_id="o-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["approval"] == {"signal": None, "data": {}, "timed_out": True}


def test_a_timeout_past_thirty_days_is_chained_and_a_signal_still_ends_it() -> None:
    h = Harness(approval(timeout_s=45 * 24 * 3600.0))
    flow_id = h.start("approval", flow_id="o-1")
    h.run_until(START + timedelta(days=35))  # one hop done, the wait goes on
    assert h.flow(flow_id).status is Status.RUNNING
    assert h.queue.only(flow_id).next.run_at == START + timedelta(days=45)
    assert h.signal(flow_id, "approve").outcome is Signalled.DELIVERED
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED


def test_a_wait_with_no_timeout_and_no_deadline_holds_no_task_and_the_sweeper_leaves_it() -> None:
    h = Harness(approval(timeout_s=None))
    flow_id = h.start("approval", flow_id="o-1")
    h.run()
    assert h.flow(flow_id).status is Status.RUNNING
    assert h.queue.due_first() is None  # no task at all
    h.advance(90 * 24 * 3600.0)
    report = h.sweep()
    assert report.rescued == 0 and h.flow(flow_id).status is Status.RUNNING
    assert h.signal(flow_id, "approve").outcome is Signalled.DELIVERED
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED


def test_the_flows_deadline_bounds_a_wait_with_no_timeout() -> None:
    h = Harness(approval(timeout_s=None))
    flow_id = h.start("approval", flow_id="o-1", deadline_s=600)
    record = h.run(flow_id)
    assert record is not None and record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "DEADLINE_EXCEEDED"


def test_cancel_during_the_wait_ends_it_and_a_late_signal_changes_nothing() -> None:
    h = Harness(approval())
    flow_id = h.start("approval", flow_id="o-1")
    h.run_until(START)
    h.cancel(flow_id)
    h.run()
    assert h.flow(flow_id).status is Status.CANCELLED
    assert h.signal(flow_id, "approve").code == "FLOW_ENDED"


def test_a_signal_step_in_a_branch() -> None:
    flow = Flow(
        name="branchy",
        steps=(
            IfStep("big", lambda ctx: ctx.input["amount"] > 100, then=("approval",), otherwise=()),
            WaitForSignal("approval", signal="approve", timeout_s=60),
            ActionStep("pay", noop),
        ),
    )
    h = Harness(flow)
    small = h.start("branchy", {"amount": 5}, flow_id="b-1")
    big = h.start("branchy", {"amount": 500}, flow_id="b-2")
    h.run_until(START)
    assert h.flow(small).status is Status.SUCCEEDED
    late = h.signal(small, "approve")
    assert late.code == "FLOW_ENDED"
    assert h.signal(big, "approve", by="carol").outcome is Signalled.DELIVERED
    record = h.run(big)
    assert record is not None and record.status is Status.SUCCEEDED


def test_a_bad_definition_is_refused() -> None:
    with pytest.raises(ConfigError, match="signal must be a name"):
        WaitForSignal("approval", signal="Not OK")
    with pytest.raises(ConfigError, match="on_timeout"):
        WaitForSignal("approval", signal="approve", on_timeout="retry")
    with pytest.raises(ConfigError, match="timeout_s"):
        WaitForSignal("approval", signal="approve", timeout_s=0)


def test_relayflow_graph_names_the_signals_it_waits_for() -> None:
    step = WaitForSignal("approval", signal=("approve", "reject"), timeout_s=60)
    assert REGISTRY.of(step).describe(step) == (
        "wait for signal approve or reject, timeout 60s then fail"
    )
