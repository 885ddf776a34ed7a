"""relayflow.core.engine.callbacks: a callback step's one-use token handed out, the flow
resumed when it is completed, a duplicate or late completion a no-op that says why, a missing
one timed out, a lost one caught by the safety-net poll. Through relayflow.testing's harness
with a virtual clock. (The step's own transitions: ``tests/unit/kinds/test_callback.py``.)"""

from __future__ import annotations

from datetime import timedelta

from relayflow import ActionStep, Flow, NotReady, PollPolicy, StepContext
from relayflow.core.engine import Completion, Ran
from relayflow.core.flows import CallbackStep
from relayflow.core.state import Status
from relayflow.testing import Harness, scripted

SAFETY = PollPolicy(initial_s=60.0, multiplier=1.0, max_interval_s=60.0, jitter=0.0)


def flow(*, check: object = None, timeout_s: float = 600.0) -> Flow:
    handed: list[str] = []

    def register(ctx: StepContext) -> dict[str, str]:
        handed.append(ctx.callback_token)  # a real one would give it to the external system
        return {"registration": "reg-1"}

    return Flow(
        name="activation",
        steps=(
            CallbackStep(
                "await_active",
                register,
                timeout_s=timeout_s,
                check=check,  # type: ignore[arg-type]
                policy=SAFETY,
                compensate=scripted({"cancelled": True}),
            ),
            ActionStep("create_entity", scripted({"entity": "e-1"})),
        ),
    )


def waiting(h: Harness) -> tuple[str, str]:
    flow_id = h.start("activation")
    assert h.deliver_next(flow_id) is Ran.ADVANCED  # the run: the token is handed out
    record = h.flow(flow_id)
    assert record.position.kind == "wait" and record.status is Status.RUNNING
    return flow_id, h.token(flow_id, "await_active")


def test_a_completed_token_resumes_the_flow_with_the_callback_output() -> None:
    h = Harness(flow())
    flow_id, token = waiting(h)
    assert h.calls_of("await_active")[0].callback_token == token
    answer = h.complete(token, {"status": "ACTIVE"})
    assert answer.outcome is Completion.COMPLETED
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["await_active"] == {"status": "ACTIVE"}
    # resumed at once: no time passed between the completion and the next step
    entity = next(e for e in record.history if e.step == "create_entity")
    waited = next(e for e in record.history if e.outcome == "completed")
    assert entity.at == waited.at


def test_a_token_completed_twice_changes_nothing_and_says_why() -> None:
    h = Harness(flow())
    flow_id, token = waiting(h)
    h.complete(token, {"n": 1})
    again = h.complete(token, {"n": 2})
    assert again.outcome is Completion.IGNORED
    assert "completed already" in again.reason
    record = h.run(flow_id)
    assert record is not None and record.outputs["await_active"] == {"n": 1}


def test_a_missing_callback_times_out_and_undoes_the_run() -> None:
    h = Harness(flow(timeout_s=600))
    flow_id, token = waiting(h)
    sent_at = h.now
    record = h.run(flow_id)
    assert record is not None and record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "CALLBACK_TIMEOUT"
    assert record.finished_at is not None and record.finished_at - sent_at == timedelta(seconds=600)
    assert len(h.calls_of("await_active", undo=True)) == 1
    late = h.complete(token, {"status": "ACTIVE"})
    assert late.outcome is Completion.IGNORED and "too late" in late.reason


def test_the_safety_net_poll_completes_a_flow_whose_callback_was_lost() -> None:
    def check(ctx: StepContext) -> dict[str, str]:
        assert ctx.outputs["await_active"] == {"registration": "reg-1"}  # what the run sent
        if ctx.poll < 2:
            raise NotReady("still pending")
        return {"status": "ACTIVE", "via": "poll"}

    h = Harness(flow(check=check))
    flow_id, _ = waiting(h)
    record = h.run(flow_id)  # no callback ever comes
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["await_active"] == {"status": "ACTIVE", "via": "poll"}
    waits = [c.context.poll for c in h.calls if (c.step, c.kind) == ("await_active", "wait")]
    assert waits == [0, 1, 2]


def test_a_callback_before_the_run_commits_is_kept_and_applied_when_it_does() -> None:
    h = Harness(flow())
    flow_id = h.start("activation")
    token = h.token(flow_id, "await_active")  # the token exists from the step's start
    assert h.complete(token, {"status": "ACTIVE"}).outcome is Completion.KEPT
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["await_active"] == {"status": "ACTIVE"}


def test_a_callback_reporting_failure_fails_the_flow_and_undoes_the_run() -> None:
    h = Harness(flow())
    flow_id, token = waiting(h)
    h.complete(token, error={"code": "REJECTED", "message": "the registration was refused"})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "REJECTED"
    assert len(h.calls_of("await_active", undo=True)) == 1


def test_an_unknown_or_forged_token_changes_nothing() -> None:
    h = Harness(flow())
    flow_id, token = waiting(h)
    forged = f"{flow_id}.{'0' * 40}"
    assert h.complete(forged, {}).outcome is Completion.IGNORED
    assert h.complete("no-dot-at-all", {}).reason == "not a callback token"
    assert h.complete(f"nobody.{token.split('.')[1]}", {}).reason == "no flow has this token"
    assert h.flow(flow_id).position.kind == "wait"


def test_a_retried_flow_gets_a_new_token_and_the_old_one_is_dead() -> None:
    h = Harness(flow(timeout_s=60))
    flow_id, old = waiting(h)
    h.run(flow_id)  # times out
    h.retry(flow_id)
    h.deliver_next(flow_id)
    new = h.token(flow_id, "await_active")
    assert new != old
    assert h.complete(old, {}).outcome is Completion.IGNORED
    assert h.complete(new, {"ok": True}).outcome is Completion.COMPLETED
