"""relayflow.core.kinds.callback: a callback step runs once like an action, handing out its
token, then waits for the token's completion, with its safety-net poll (or, without one, its
timeout) as its next task; a completion that comes before the run committed is kept and applied
when it does.

The flow here: ``hook`` (callback, 600 s, undone by a compensation) -> ``create`` (action).
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from relayflow.core import planner
from relayflow.core.errors import NotReady, PermanentError, RetryableError
from relayflow.core.flows import ActionStep, CallbackStep, Flow, PollPolicy, StepContext
from relayflow.core.kinds import REGISTRY, Callback
from relayflow.core.kinds.callback import no_callback_yet, signal, signal_outcome
from relayflow.core.planner import Completed, Failed, Plan, Retry
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import EffectState, FlowRecord
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, QUEUES, RETRY, noop, not_ready

SAFETY = PollPolicy(initial_s=60.0, multiplier=1.0, max_interval_s=60.0, jitter=0.0)
HOOK = CallbackStep("hook", noop, timeout_s=600, retry=RETRY, compensate=noop)
KIND = Callback()


def flow(hook: CallbackStep = HOOK) -> Flow:
    return Flow(name="activation", steps=(hook, ActionStep("create", noop)))


def plan(seconds: float = 0, *, hook: CallbackStep = HOOK) -> Plan:
    return Plan(
        definition=flow(hook),
        queues=QUEUES,
        now=NOW + timedelta(seconds=seconds),
        kinds=REGISTRY,
        nonce="n-1",
    )


def started(hook: CallbackStep = HOOK) -> FlowRecord:
    record = planner.new_record(
        plan(hook=hook), flow_id="act-1", input={}, message_id=None, deadline_s=None
    )
    return record.focused("hook")


def sent(hook: CallbackStep = HOOK) -> FlowRecord:
    """The step's run has committed, answering ``{"registration": "r-1"}``: it waits."""
    return planner.after(plan(hook=hook), started(hook), Completed({"registration": "r-1"}))


def test_a_callback_step_is_handed_a_one_use_token_when_it_starts() -> None:
    token = started().tracks["hook"].token
    assert token is not None and re.fullmatch(r"act-1\.[0-9a-f]{40}", token)
    other = planner.new_record(
        replace(plan(), nonce="n-2"), flow_id="act-1", input={}, message_id=None, deadline_s=None
    )
    assert other.tracks["hook"].token != token  # unguessable: the plan's nonce is in it


def test_after_its_run_the_step_waits_for_its_token_until_its_timeout() -> None:
    waiting = sent()
    assert waiting.status is Status.RUNNING
    assert (waiting.position.kind, waiting.position.attempt, waiting.position.poll) == (
        TaskKind.WAIT,
        0,
        0,
    )
    assert waiting.tracks["hook"].sent == {"registration": "r-1"}  # what a check is shown
    assert [(e.step, e.state) for e in waiting.effects] == [("hook", EffectState.DONE)]
    assert waiting.history[-1].outcome == "sent; waiting for the callback"
    assert waiting.next is not None and waiting.next.queue == "q-polls"
    assert waiting.next.run_at == NOW + timedelta(seconds=600)  # no safety net: the timeout


def test_with_a_safety_net_the_next_task_is_its_first_check() -> None:
    netted = replace(HOOK, check=noop, policy=SAFETY)
    waiting = sent(netted)
    assert waiting.next is not None and waiting.next.run_at == NOW + timedelta(seconds=60)


def test_a_completion_while_waiting_ends_the_step_with_what_it_carried() -> None:
    done = signal(plan(5), sent(), {"output": {"status": "ACTIVE"}})
    assert done.outputs["hook"] == {"status": "ACTIVE"}
    assert done.history[-1].outcome == "completed"
    assert list(done.tracks) == ["create"]


def test_a_completion_reporting_failure_fails_the_flow_and_undoes_the_run() -> None:
    error = {"code": "REJECTED", "message": "the registration was refused"}
    failed = signal(plan(5), sent(), {"error": error})
    assert failed.status is Status.COMPENSATING
    assert failed.pending_result is not None and failed.pending_result.code == "REJECTED"
    assert (failed.position.step, failed.position.kind) == ("hook", TaskKind.COMPENSATE)


def test_a_completion_before_the_run_committed_is_kept_and_applied_when_it_does() -> None:
    kept = signal(plan(), started(), {"output": {"status": "ACTIVE"}})
    assert kept.tracks["hook"].early == {"output": {"status": "ACTIVE"}}
    assert kept.position.kind is TaskKind.ACTION  # still at its run
    done = planner.after(plan(1), kept.focused("hook"), Completed({"registration": "r-1"}))
    assert done.outputs["hook"] == {"status": "ACTIVE"}  # the completion, not what it sent
    assert list(done.tracks) == ["create"]


@pytest.mark.parametrize(
    ("completion", "outcome"),
    [
        ({"output": {"a": 1}}, Completed({"a": 1})),
        ({}, Completed({})),
        ({"output": None}, Completed({})),
        (
            {"error": {"code": "NO", "message": "refused"}},
            Failed(PermanentError("refused", code="NO")),
        ),
    ],
    ids=["output", "nothing", "null-output", "error"],
)
def test_a_completion_says_the_steps_output_or_its_failure(
    completion: dict[str, Any], outcome: Completed | Failed
) -> None:
    said = signal_outcome(completion)
    assert type(said) is type(outcome)
    if isinstance(said, Completed):
        assert said == outcome
    else:
        assert isinstance(outcome, Failed)
        assert (said.error.code, said.error.message) == (outcome.error.code, outcome.error.message)


def test_a_failure_without_a_code_or_message_is_a_callback_error() -> None:
    said = signal_outcome({"error": {}})
    assert isinstance(said, Failed)
    assert (said.error.code, said.error.message) == (
        "CALLBACK_ERROR",
        "the callback reported a failure",
    )


def test_with_no_callback_by_its_timeout_the_flow_times_out_and_undoes_the_run() -> None:
    waiting = sent()
    context = StepContext(
        flow_id="act-1", flow="activation", step="hook", input={}, outputs={}, idempotency_key="k"
    )
    with pytest.raises(NotReady, match="no callback yet"):  # its WAIT task's handler, then
        no_callback_yet(context)
    timed_out = planner.after(plan(600), waiting, not_ready("no callback yet"))
    assert timed_out.status is Status.COMPENSATING
    assert timed_out.pending_result is not None
    assert timed_out.pending_result.code == "CALLBACK_TIMEOUT"


def test_a_safety_net_check_not_ready_checks_again_on_its_policy() -> None:
    netted = replace(HOOK, check=noop, policy=SAFETY)
    checked = planner.after(plan(60, hook=netted), sent(netted), not_ready("still pending"))
    assert checked.position.poll == 1
    assert checked.next is not None and checked.next.run_at == NOW + timedelta(seconds=120)


def test_its_run_is_retried_like_an_action() -> None:
    again = planner.after(plan(), started(), Retry(RetryableError("503", code="HTTP_503")))
    assert (again.position.kind, again.position.attempt) == (TaskKind.ACTION, 1)
    assert again.next is not None and again.next.run_at == NOW + timedelta(seconds=1)


def test_each_task_runs_its_handler() -> None:
    check = lambda ctx: {"via": "poll"}  # noqa: E731
    undo = lambda ctx: {"undone": True}  # noqa: E731
    step = replace(HOOK, check=check, compensate=undo)
    assert KIND.handler(step, TaskKind.ACTION) is step.run
    assert KIND.handler(step, TaskKind.WAIT) is check
    assert KIND.handler(step, TaskKind.COMPENSATE) is undo
    assert KIND.handler(CallbackStep("h", noop), TaskKind.WAIT) is no_callback_yet


def test_an_undo_of_a_step_that_lost_its_compensation_no_longer_fits() -> None:
    undo = Position(step_index=0, step="hook", kind=TaskKind.COMPENSATE)
    assert KIND.fits(HOOK, undo) == ""
    bare = replace(HOOK, compensate=None)
    assert KIND.fits(bare, undo) == "step 'hook' no longer has a compensation"
    assert KIND.fits(bare, undo.model_copy(update={"kind": TaskKind.WAIT})) == ""


def test_it_is_described_by_its_timeout_and_safety_net() -> None:
    assert KIND.describe(HOOK) == "callback, timeout 600s, no safety net"
    assert (
        KIND.describe(replace(HOOK, check=noop)) == "callback, timeout 600s, with a safety-net poll"
    )
