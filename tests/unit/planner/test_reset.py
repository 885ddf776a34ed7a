"""relayflow.core.planner.reset: an operator runs an ended flow again from a chosen step, in a
new generation — the effects of that step and of the steps after it undone newest first (or
kept, by choice), those of the steps before it kept — and a dry run says exactly that first.

First the planner's transitions, pure, at a fixed time; then the same through
relayflow.testing's harness, against a client API that honours idempotency keys, where the
handlers' calls show what a reset did and its dry run is held to it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from relayflow import ActionStep, Flow, RetryPolicy, StepContext
from relayflow.core import planner
from relayflow.core.errors import InvalidTransition, PermanentError, RetryableError
from relayflow.core.flows import ChildFlow, ForEach, IfStep, Registry
from relayflow.core.planner import Completed, Failed, Retry
from relayflow.core.planner.reset import RESET_UNDO_FAILED, scope_of
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import (
    UNDO_TRACK,
    ChildOf,
    Cleanup,
    EffectState,
    FlowRecord,
    NextTask,
)
from relayflow.core.state import Status
from relayflow.testing import Harness
from tests.unit.planner.sample import NOW, plan, started

FAST = RetryPolicy(max_attempts=2, initial_s=1.0, max_interval_s=5.0, jitter=0.0)


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def chain(*names: str) -> Flow:
    """Actions in a row, each undone by its compensation."""
    return Flow(
        name="chain",
        steps=tuple(ActionStep(n, noop, retry=FAST, compensate=noop) for n in names),
    )


ABC = chain("a", "b", "c")


def succeeded(flow: Flow = ABC) -> FlowRecord:
    """``flow`` run to its end, each step done a minute after the one before."""
    record = started(flow=flow)
    for i, name in enumerate(flow.graph.order):
        at = NOW + timedelta(minutes=i)
        record = planner.after(plan(at, flow=flow), record.focused(name), Completed({"n": name}))
    assert record.status is Status.SUCCEEDED
    return record


LATER = NOW + timedelta(hours=1)


# -- the planner ------------------------------------------------------------------------------


def test_a_reset_undoes_the_step_and_those_after_it_newest_first_then_runs_them_again() -> None:
    done = succeeded()
    resetting = planner.reset(plan(LATER, flow=ABC), done, "b", reason="redo", by="ops@x")
    # the new generation first undoes c, then b, the flow RUNNING on its undo track
    assert resetting.status is Status.RUNNING
    assert resetting.focus == UNDO_TRACK
    assert (resetting.position.step, resetting.position.kind) == ("c", TaskKind.COMPENSATE)
    assert resetting.position.generation == 1
    assert resetting.reset is not None and resetting.reset.to_undo == ["c", "b"]
    assert (resetting.reset.by, resetting.reset.reason) == ("ops@x", "redo")
    entry = resetting.history[-1]
    assert (entry.outcome, entry.by) == ("reset", "ops@x")
    assert entry.detail == "generation 1: reset to b, undoing what ran from it: redo"
    # an undo still reads the outputs of the steps that run again
    assert set(resetting.outputs) == {"a", "b", "c"}
    undoing_b = planner.after(plan(LATER, flow=ABC), resetting, Completed({}))
    assert (undoing_b.position.step, undoing_b.position.kind) == ("b", TaskKind.COMPENSATE)
    again = planner.after(plan(LATER, flow=ABC), undoing_b, Completed({}))
    # then b runs again, with a's output kept and b's and c's dropped
    assert again.status is Status.RUNNING
    assert (again.position.step, again.position.kind, again.position.generation) == (
        "b",
        TaskKind.ACTION,
        1,
    )
    assert again.outputs == {"a": {"n": "a"}}
    states = {e.step: e.state for e in again.effects}
    assert states == {"a": EffectState.DONE, "b": EffectState.UNDONE, "c": EffectState.UNDONE}
    assert again.reset is not None and again.reset.to_undo == []


def test_the_dry_run_lists_what_the_reset_then_does() -> None:
    done = succeeded()
    preview = planner.preview_reset(plan(LATER, flow=ABC), done, "b")
    resetting = planner.reset(plan(LATER, flow=ABC), done, "b")
    assert preview.allowed and preview.action == "reset"
    assert preview.rerun == ("b", "c")
    assert preview.undone == ("c", "b")
    assert preview.kept == ("a",)
    assert resetting.reset is not None
    assert tuple(resetting.reset.rerun) == preview.rerun
    assert tuple(resetting.reset.to_undo) == preview.undone
    assert preview.detail == {"step": "b", "undo": True, "status": "SUCCEEDED", "generation": 1}


def test_keeping_the_effects_starts_the_step_at_once_and_leaves_them_live() -> None:
    done = succeeded()
    again = planner.reset(plan(LATER, flow=ABC), done, "b", undo=False)
    assert again.status is Status.PENDING
    assert (again.position.step, again.position.kind, again.position.generation) == (
        "b",
        TaskKind.ACTION,
        1,
    )
    assert again.outputs == {"a": {"n": "a"}}
    assert {e.step: e.state for e in again.effects} == dict.fromkeys("abc", EffectState.DONE)
    preview = planner.preview_reset(plan(LATER, flow=ABC), done, "b", undo=False)
    assert (preview.rerun, preview.undone, preview.kept) == (("b", "c"), (), ("a", "b", "c"))
    assert preview.detail["replayed"] == ["b", "c"]  # under the keys they were made with


def test_an_unknown_effect_after_the_step_is_undone_and_an_undone_one_stays_undone() -> None:
    done = succeeded()
    effects = [
        e.model_copy(update={"state": EffectState.UNKNOWN}) if e.step == "c" else e
        for e in done.effects
    ]
    effects = [
        e.model_copy(update={"state": EffectState.UNDONE}) if e.step == "b" else e for e in effects
    ]
    record = done.model_copy(update={"effects": effects})
    scope = scope_of(plan(LATER, flow=ABC), record, "b", undo=True)
    assert [e.step for e in scope.undone] == ["c"]
    assert [e.step for e in scope.kept] == ["a"]


def test_an_undo_that_fails_for_good_ends_the_reset_failed_naming_what_was_not_undone() -> None:
    resetting = planner.reset(plan(LATER, flow=ABC), succeeded(), "a")
    failed = planner.after(plan(LATER, flow=ABC), resetting, Failed(PermanentError("c is locked")))
    assert failed.status is Status.FAILED
    assert failed.result is not None and failed.result.code == RESET_UNDO_FAILED
    assert failed.result.error is not None
    assert failed.result.error["not_undone"] == ["c", "b", "a"]
    assert failed.result.error["reset_to"] == "a"
    assert "undoing c failed (c is locked)" in failed.result.message
    states = {e.step: e.state for e in failed.effects}
    assert states == {"a": EffectState.DONE, "b": EffectState.DONE, "c": EffectState.UNDO_FAILED}
    assert failed.result_published is False  # the new generation's end event is due
    # a reset again undoes it again, with the rest
    again = planner.preview_reset(plan(LATER, flow=ABC), failed, "a")
    assert again.undone == ("c", "b", "a")


def test_a_retryable_undo_error_is_retried_on_the_steps_policy_then_fails_the_reset() -> None:
    resetting = planner.reset(plan(LATER, flow=ABC), succeeded(), "c")
    busy = Retry(RetryableError("503", code="UNAVAILABLE"))
    retried = planner.after(plan(LATER, flow=ABC), resetting, busy)
    assert retried.status is Status.RUNNING
    assert (retried.position.step, retried.position.attempt) == ("c", 1)
    assert retried.next is not None and retried.next.run_at == LATER + timedelta(seconds=1)
    spent = planner.after(plan(LATER, flow=ABC), retried, busy)
    assert spent.status is Status.FAILED
    assert spent.result is not None and spent.result.code == RESET_UNDO_FAILED
    assert "its tries are spent: 503" in spent.result.message


def refused(record: FlowRecord, step: str, flow: Flow = ABC, *, undo: bool = True) -> str:
    """Why a reset is refused: the preview says it, and the reset raises it."""
    preview = planner.preview_reset(plan(LATER, flow=flow), record, step, undo=undo)
    assert not preview.allowed
    with pytest.raises(InvalidTransition) as raised:
        planner.reset(plan(LATER, flow=flow), record, step, undo=undo)
    assert str(raised.value) == preview.reason
    return preview.reason


def test_a_running_flow_is_refused() -> None:
    assert "the flow is PENDING: a reset runs an ended flow again" in refused(started(), "a")


def test_a_step_the_flow_does_not_have_is_refused_naming_its_steps() -> None:
    assert refused(succeeded(), "zz") == "chain v1 has no step 'zz' (its steps: a, b, c)"


def test_a_step_inside_a_foreach_and_a_foreach_that_would_run_again_are_refused() -> None:
    each = ForEach("each", items=lambda ctx: [], steps=(ActionStep("charge", noop),))
    flow = Flow(name="items", steps=(ActionStep("a", noop, compensate=noop), each))
    done = succeeded(flow)
    assert "step 'charge' runs inside ForEach 'each'" in refused(done, "charge", flow)
    assert "ForEach 'each' would run again" in refused(done, "a", flow)


def test_a_reset_runs_again_the_foreach_items_the_flows_end_undid() -> None:
    # given a flow whose step after its ForEach failed for good, the items' charges undone
    api = Api()
    each = ForEach("each", items=lambda ctx: [1, 2], steps=(made_by(api, "charge"),))
    declines = [True]

    def last(ctx: StepContext) -> dict[str, Any]:
        if declines.pop() if declines else False:
            raise PermanentError("declined", code="DECLINED")
        return {}

    flow = Flow(name="items", steps=(each, ActionStep("last", last)))
    h = Harness(flow)
    flow_id = h.start("items", {})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.FAILED and record.gathered
    assert api.live == set()  # the items' charges were undone with the rest

    # when an operator resets it to the last step
    preview = h.preview_reset(flow_id, "last")
    h.reset(flow_id, "last")
    record = h.run(flow_id)

    # then the ForEach, whose output described what was undone, ran its items again too (as
    # the dry run said), under fresh keys
    assert preview.allowed and preview.rerun == ("each", "last")
    assert record is not None and record.status is Status.SUCCEEDED
    assert len(api.made) == 4 and len(api.live) == 2


def test_a_succeeded_flows_foreach_is_not_run_again_by_a_reset() -> None:
    api = Api()
    each = ForEach("each", items=lambda ctx: [1, 2], steps=(made_by(api, "charge"),))
    flow = Flow(name="items", steps=(ActionStep("first", noop), each, ActionStep("last", noop)))
    h = Harness(flow)
    flow_id = h.start("items", {})
    assert h.run(flow_id).status is Status.SUCCEEDED  # type: ignore[union-attr]
    preview = h.preview_reset(flow_id, "first")
    assert not preview.allowed and "ForEach 'each' would run again" in str(preview.reason)
    assert h.preview_reset(flow_id, "last").allowed


def test_a_step_in_the_branch_not_taken_is_refused() -> None:
    flow = Flow(
        name="choice",
        steps=(
            IfStep("big", lambda ctx: True, then=("yes",), otherwise=("no",)),
            ActionStep("yes", noop, after=("big",)),
            ActionStep("no", noop, after=("big",)),
        ),
    )
    record = started(flow=flow)
    record = planner.after(plan(flow=flow), record, Completed({"branch": "then"}))
    record = planner.after(plan(flow=flow), record, Completed({}))
    assert record.status is Status.SUCCEEDED
    reason = refused(record, "no", flow)
    assert reason == (
        "step 'no' is in the branch choice 'big' did not take: it would not run "
        "(reset to 'big' to decide again)"
    )
    assert planner.preview_reset(plan(LATER, flow=flow), record, "big").rerun == (
        "big",
        "yes",
        "no",
    )


def test_a_flow_whose_clean_up_runs_or_that_is_a_child_is_refused() -> None:
    done = succeeded()
    pending = Cleanup(since=NOW, until=LATER + timedelta(days=1))  # still undoing
    cleaning = done.model_copy(update={"cleanup": pending})
    assert "its clean-up is still undoing" in refused(cleaning, "a")
    pos = Position(step_index=0, step="pay", kind=TaskKind.CHILD_WAIT)
    wake = NextTask(queue="q", task_id="t", run_at=NOW, position=pos)
    link = ChildOf(key="order-7", flow_id="order-7", step="pay", wake=wake)
    child = done.model_copy(update={"child_of": link})
    assert refused(child, "a") == (
        "it is a child flow of order-7 (step 'pay'): reset the parent to 'pay' to run a fresh child"
    )


def test_a_flow_whose_type_is_not_deployed_is_refused_by_the_preview() -> None:
    gone = planner.Plan(definition=None, queues=plan().queues, now=LATER, kinds=plan().kinds)
    preview = planner.preview_reset(gone, succeeded(), "a")
    assert not preview.allowed
    assert preview.reason == "no deployed version runs 'chain' flows (v1)"


def test_a_retry_still_refuses_a_succeeded_flow() -> None:
    with pytest.raises(InvalidTransition, match="illegal transition SUCCEEDED -> PENDING"):
        planner.restart(plan(LATER, flow=ABC), succeeded())


def test_a_retry_after_a_reset_starts_without_its_reset() -> None:
    failed = planner.after(
        plan(LATER, flow=ABC),
        planner.reset(plan(LATER, flow=ABC), succeeded(), "c"),
        Failed(PermanentError("no")),
    )
    assert failed.reset is not None
    assert planner.restart(plan(LATER, flow=ABC), failed).reset is None


# -- through the harness -------------------------------------------------------------------


class Api:
    """A client API that honours idempotency keys; ``refuse`` names effects it will not undo."""

    def __init__(self) -> None:
        self.made: dict[str, str] = {}
        self.live: set[str] = set()
        self.refuse: set[str] = set()

    def create(self, key: str) -> str:
        if key not in self.made:
            self.made[key] = f"eff-{len(self.made) + 1}"
            self.live.add(self.made[key])
        return self.made[key]

    def delete(self, effect_id: str) -> None:
        if effect_id in self.refuse:
            raise PermanentError(f"{effect_id} is locked", code="LOCKED")
        self.live.discard(effect_id)


def made_by(api: Api, name: str) -> ActionStep:
    def run(ctx: StepContext) -> dict[str, str]:
        return {"id": api.create(ctx.idempotency_key)}

    def undo(ctx: StepContext) -> dict[str, str]:
        api.delete(ctx.outputs[name]["id"])
        return {}

    after = {"b": ("a",), "c": ("a",), "d": ("b", "c")}.get(name)
    return ActionStep(name, run, retry=FAST, compensate=undo, after=after)


def diamond(api: Api) -> Flow:
    """a, then b and c in parallel, then d: c does not run after b."""
    return Flow(name="diamond", steps=tuple(made_by(api, n) for n in "abcd"))


def ran(api: Api) -> tuple[Harness, str, dict[str, str]]:
    """The diamond flow run to its end: the harness, its id, each step's effect id."""
    h = Harness(diamond(api))
    flow_id = h.start("diamond", {})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    return h, flow_id, {s: out["id"] for s, out in record.outputs.items()}


def test_reset_to_a_step_undoes_it_and_what_ran_after_it_newest_first_as_its_dry_run_said() -> None:
    api = Api()
    h, flow_id, first = ran(api)
    keys = {c.step: c.context.idempotency_key for c in h.calls}
    preview = h.preview_reset(flow_id, "b")
    seen = len(h.calls)
    h.reset(flow_id, "b", reason="b was wrong", by="ops@example.com")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    calls = h.calls[seen:]
    undos = [c.step for c in calls if c.kind is TaskKind.COMPENSATE]
    forward = [c.step for c in calls if c.kind is TaskKind.ACTION]
    # the effects of b and of d (after b) were undone, newest first, then b and d ran again
    assert undos == ["d", "b"] == list(preview.undone)
    assert forward == ["b", "d"] == list(preview.rerun)
    assert api.live == {
        first["a"],
        first["c"],
        record.outputs["b"]["id"],
        record.outputs["d"]["id"],
    }
    # a (before b) and c (a parallel branch) were kept: not called again, their effects live
    assert set(preview.kept) == {"a", "c"}
    assert record.outputs["a"]["id"] == first["a"] and record.outputs["c"]["id"] == first["c"]
    # b ran again under a fresh key: its first effect is gone
    rerun_keys = {c.step: c.context.idempotency_key for c in calls if c.kind is TaskKind.ACTION}
    assert rerun_keys["b"] == keys["b"].replace("-e0", "-e1")
    assert record.position.generation == 1
    entry = next(e for e in record.history if e.outcome == "reset")
    assert entry.by == "ops@example.com" and entry.detail.endswith("b was wrong")
    assert [(e["generation"], e["code"]) for e in h.results(flow_id)] == [(0, "OK"), (1, "OK")]


def test_reset_keeping_the_effects_replays_each_step_under_the_same_key() -> None:
    api = Api()
    h, flow_id, first = ran(api)
    keys = {c.step: c.context.idempotency_key for c in h.calls}
    preview = h.preview_reset(flow_id, "b", undo=False)
    seen = len(h.calls)
    h.reset(flow_id, "b", undo=False)
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    calls = h.calls[seen:]
    assert [c.step for c in calls] == ["b", "d"] == list(preview.rerun)
    assert preview.undone == () and set(preview.kept) == set("abcd")
    assert {c.step: c.context.idempotency_key for c in calls} == {"b": keys["b"], "d": keys["d"]}
    assert len(api.made) == 4  # no second effect of any step
    assert {s: out["id"] for s, out in record.outputs.items()} == first


def test_an_undo_the_api_refuses_ends_the_reset_failed_and_a_reset_again_undoes_it() -> None:
    api = Api()
    h, flow_id, first = ran(api)
    api.refuse = {first["b"]}
    h.reset(flow_id, "b", reason="redo b")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == RESET_UNDO_FAILED
    assert record.result.error is not None and record.result.error["not_undone"] == ["b"]
    assert first["d"] not in api.live and first["b"] in api.live  # d undone, b left
    assert h.results(flow_id)[-1]["code"] == RESET_UNDO_FAILED
    # when the API lets go, a reset again undoes b (its undo had failed) and runs on
    api.refuse = set()
    assert h.preview_reset(flow_id, "b").undone == ("b",)
    h.reset(flow_id, "b", reason="b unlocked")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert first["b"] not in api.live and len(api.live) == 4


def test_an_active_flow_is_refused_and_the_dry_run_says_why() -> None:
    api = Api()
    h = Harness(diamond(api))
    flow_id = h.start("diamond", {})
    preview = h.preview_reset(flow_id, "a")
    assert not preview.allowed and preview.reason.startswith("the flow is PENDING")
    with pytest.raises(InvalidTransition, match="the flow is PENDING"):
        h.reset(flow_id, "a")
    assert h.calls == []


def test_reset_to_a_child_flow_step_undoes_its_child_then_starts_a_fresh_one() -> None:
    api = Api()
    payment = Flow(name="payment", steps=(made_by(api, "charge"),))
    order = Flow(name="order", steps=(ChildFlow("pay", flow="payment"), made_by(api, "ship")))
    h = Harness(Registry([order, payment]))
    flow_id = h.start("order", {}, flow_id="o-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    charged = h.flow("o-1-pay-g0a0").outputs["charge"]["id"]
    preview = h.preview_reset(flow_id, "pay")
    assert (preview.undone, preview.rerun) == (("ship", "pay"), ("pay", "ship"))
    h.reset(flow_id, "pay")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert charged not in api.live  # the first child's charge was undone by its clean-up
    assert h.flow("o-1-pay-g1a0").status is Status.SUCCEEDED  # a fresh child ran
    assert len(api.live) == 2
    with pytest.raises(InvalidTransition, match="child flow step 'pay' would start a fresh"):
        h.reset(flow_id, "pay", undo=False)
