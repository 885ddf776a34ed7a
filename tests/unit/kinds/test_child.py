"""ChildFlow steps through relayflow.testing's harness: a child's success (the step's output is
the child's), its failure (the step fails; a fresh child on retry), the parent cancelled (its
child is cancelled), compensation across parent and child newest first, duplicate deliveries
starting one child, a long parent id, a deadline while waiting, and a ForEach of children that
keeps the parent's document small."""

from __future__ import annotations

import re
from typing import Any

import pytest

from relayflow import (
    ActionStep,
    ChildFlow,
    Flow,
    PermanentError,
    RetryPolicy,
    Sleep,
    StepContext,
)
from relayflow.core.errors import ConfigError
from relayflow.core.flows import ForEach, Registry
from relayflow.core.kinds.child import child_id
from relayflow.core.position import FLOW_ID_PATTERN, TaskKind
from relayflow.core.state import Status
from relayflow.testing import Harness

undone: list[str] = []


@pytest.fixture(autouse=True)
def _forget() -> None:
    undone.clear()


def act(name: str, output: dict[str, Any] | None = None) -> ActionStep:
    def run(ctx: StepContext) -> dict[str, Any]:
        return dict(output or {"done": name, "amount": ctx.input.get("amount")})

    def undo(ctx: StepContext) -> dict[str, Any]:
        undone.append(name)
        return {}

    return ActionStep(name, run, compensate=undo)


def failing(name: str) -> ActionStep:
    def run(ctx: StepContext) -> dict[str, Any]:
        raise PermanentError("card declined", code="DECLINED")

    return ActionStep(name, run)


def payment(*, fail: bool = False) -> Flow:
    steps: tuple[Any, ...] = (act("reserve_funds"), act("capture"))
    if fail:
        steps = (act("reserve_funds"), failing("capture"))
    return Flow(name="payment", steps=steps)


def order(child: ChildFlow | None = None, *, after: bool = False) -> Flow:
    charge = child or ChildFlow(
        "charge", flow="payment", input=lambda ctx: {"amount": ctx.input["total"]}
    )
    steps: tuple[Any, ...] = (act("reserve_stock"), charge, act("ship"))
    if after:
        steps = (*steps, failing("notify"))
    return Flow(name="order", steps=steps)


def test_a_child_flow_s_output_is_the_step_s_output() -> None:
    h = Harness([order(), payment()])
    fid = h.start("order", {"total": 42}, flow_id="o-1")
    record = h.run(fid)
    assert record is not None and record.status is Status.SUCCEEDED
    child_key = "o-1-charge-g0a0"
    child = h.flow(child_key)
    assert child.status is Status.SUCCEEDED and child.input == {"amount": 42}
    assert child.child_of is not None and child.child_of.flow_id == "o-1"
    assert child.child_of.step == "charge"
    assert record.outputs["charge"] == child.result.data == {"done": "capture", "amount": 42}
    assert "charge child_wait #0: child succeeded" in h.path(fid)


def test_the_parent_holds_no_task_while_its_child_runs() -> None:
    h = Harness([order(), payment()])
    fid = h.start("order", {"total": 1}, flow_id="o-2")
    while h.flow(fid).position.kind is not TaskKind.CHILD_WAIT:
        h.deliver_next()
    parent = h.flow(fid)
    assert parent.tracks["charge"].next is None and parent.next_run_at is None
    assert parent.status is Status.RUNNING
    assert h.queue.due_first(fid) is None  # woken by the child's end, never polled


def test_a_failed_child_fails_the_step_with_its_error() -> None:
    h = Harness([order(), payment(fail=True)])
    fid = h.start("order", {"total": 5}, flow_id="o-3")
    record = h.run(fid)
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "CHILD_DECLINED"
    assert "card declined" in record.result.message
    # the child undid its own effects; the parent undid its older one, newest first
    assert undone == ["reserve_funds", "reserve_stock"]
    assert h.flow("o-3-charge-g0a0").status is Status.FAILED


def test_a_retry_policy_starts_a_fresh_child_for_each_try() -> None:
    tries = ChildFlow(
        "charge",
        flow="payment",
        input=lambda ctx: {"amount": 1},
        retry=RetryPolicy(max_attempts=2, initial_s=5),
    )
    h = Harness([order(tries), payment(fail=True)])
    fid = h.start("order", {"total": 1}, flow_id="o-4")
    record = h.run(fid)
    assert record is not None and record.status is Status.FAILED
    assert h.flow("o-4-charge-g0a0").status is Status.FAILED
    assert h.flow("o-4-charge-g0a1").status is Status.FAILED  # a fresh child, second try
    assert "charge child_wait #0: child failed" in h.path(fid)


def test_cancelling_the_parent_cancels_its_running_child() -> None:
    slow = Flow(name="payment", steps=(act("reserve_funds"), Sleep("settle", seconds=3600)))
    h = Harness([order(), slow])
    fid = h.start("order", {"total": 1}, flow_id="o-5")
    child_key = "o-5-charge-g0a0"
    while child_key not in h.store.docs or "settle" not in h.flow(child_key).tracks:
        h.deliver_next()
    h.cancel(fid, "customer changed their mind")
    record = h.run(fid)
    assert record is not None and record.status is Status.CANCELLED
    child = h.flow(child_key)
    assert child.status is Status.CANCELLED
    assert child.result is not None and "o-5" in child.result.message
    # the child's effect is undone before the parent's older one
    assert undone == ["reserve_funds", "reserve_stock"]


def test_compensation_runs_newest_first_across_parent_and_child() -> None:
    h = Harness([order(after=True), payment()])
    fid = h.start("order", {"total": 9}, flow_id="o-6")
    record = h.run(fid)
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "DECLINED"
    # ship (parent, newest), then the child's capture and reserve_funds, then reserve_stock
    assert undone == ["ship", "capture", "reserve_funds", "reserve_stock"]
    # the harness records the child step's undo where it begins: after ship, before the child's
    undos = [c.step for c in h.calls if c.kind is TaskKind.COMPENSATE]
    assert undos == ["ship", "charge", "capture", "reserve_funds", "reserve_stock"]
    child = h.flow("o-6-charge-g0a0")
    assert child.status is Status.SUCCEEDED and not child.cleaning
    assert child.cleanup is not None and child.cleanup.state == "done"
    assert any(line.startswith("charge child_undo") for line in h.path(fid))


def test_a_long_parent_id_gives_a_bounded_child_id() -> None:
    h = Harness([order(), payment()])
    fid = h.start("order", {"total": 3}, flow_id="x" * 100)
    record = h.run(fid)
    assert record is not None and record.status is Status.SUCCEEDED
    parent = h.flow(fid)
    ids = [k for k in h.store.docs if k != parent.key]
    assert len(ids) == 1 and len(ids[0]) <= 100
    assert re.fullmatch(FLOW_ID_PATTERN[1:-1], ids[0])
    assert ids[0] == child_id(
        parent, parent.position.model_copy(update={"step": "charge", "step_index": 1, "attempt": 0})
    )


def test_the_parent_s_deadline_bounds_the_wait() -> None:
    slow = Flow(name="payment", steps=(act("reserve_funds"), Sleep("settle", seconds=3600)))
    h = Harness([order(), slow])
    fid = h.start("order", {"total": 1}, flow_id="o-8", deadline_s=60)
    child_key = "o-8-charge-g0a0"
    record = h.run(fid)
    assert record is not None and record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "DEADLINE_EXCEEDED"
    assert (
        record.finished_at is not None
        and (record.finished_at - record.created_at).total_seconds() == 60
    )
    assert h.flow(child_key).status is Status.CANCELLED  # undoing the step cancels the child
    assert undone == ["reserve_funds", "reserve_stock"]


def test_a_foreach_of_children_keeps_the_parent_small() -> None:
    def run_many(n: int) -> int:
        each = ForEach(
            "pay_all",
            items=lambda ctx: list(range(ctx.input["n"])),
            steps=(ChildFlow("pay", flow="payment", input=lambda ctx: {"amount": ctx.item}),),
            concurrency=5,
        )
        h = Harness([Flow(name="batch", steps=(each,)), payment()])
        fid = h.start("batch", {"n": n}, flow_id=f"b-{n}")
        record = h.run(fid)
        assert record is not None and record.status is Status.SUCCEEDED
        assert record.outputs["pay_all"]["children"] == n
        kids = [k for k in h.store.docs if "-pay-" in k]
        assert len(kids) == n
        return len(record.model_dump_json())

    small, large = run_many(20), run_many(200)
    assert large - small < 16  # the parent does not grow with the item count


def test_a_child_step_naming_an_unregistered_flow_stops_the_build() -> None:
    with pytest.raises(ConfigError, match="child step 'charge'"):
        Harness(Registry([order()]))


def test_an_operator_retry_starts_a_fresh_child_where_the_child_was_undone() -> None:
    h = Harness([order(after=True), payment()])
    fid = h.start("order", {"total": 4}, flow_id="o-10")
    h.run(fid)
    h.deploy([order(), payment()])  # the notify step fixed: it no longer fails
    h.retry(fid)
    record = h.run(fid)
    assert record is not None and record.status is Status.SUCCEEDED
    assert h.flow("o-10-charge-g1a0").status is Status.SUCCEEDED  # the new generation's child
    assert record.outputs["charge"] == {"done": "capture", "amount": 4}


def test_a_grandchild_is_undone_newest_first_through_its_parent() -> None:
    grand = Flow(name="ledger", steps=(act("post_entry"),))
    middle = Flow(name="payment", steps=(act("reserve_funds"), ChildFlow("book", flow="ledger")))
    h = Harness([order(after=True), middle, grand])
    fid = h.start("order", {"total": 1}, flow_id="o-11")
    record = h.run(fid)
    assert record is not None and record.status is Status.FAILED
    assert h.flow("o-11-charge-g0a0-book-g0a0").status is Status.SUCCEEDED
    assert undone == ["ship", "post_entry", "reserve_funds", "reserve_stock"]
