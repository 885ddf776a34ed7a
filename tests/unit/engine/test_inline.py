"""Steps due at once run in the request of the step before them (Limits.continue_inline):
the claim folded into the commit that precedes it, one write, task and request fewer, and
every invariant kept — a crash mid-step, a breaker that says not now, a poll's budget."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep, RetryPolicy, StepContext
from relayflow.core.engine import Limits
from relayflow.core.state import Status
from relayflow.testing import Crash, Harness, scripted

POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=30.0, max_polls=20)


def registration(finish: Any) -> Flow:
    return Flow(
        name="reg",
        steps=(
            ActionStep("register", lambda ctx: {"id": "r-1"}, compensate=lambda ctx: {}),
            PollStep(
                "await_active",
                scripted(NotReady("PENDING"), NotReady("PENDING"), {"state": "ACTIVE"}),
                policy=POLL,
            ),
            ActionStep("create_entity", finish, retry=RetryPolicy(max_attempts=3)),
        ),
    )


@pytest.mark.parametrize("inline", [True, False])
def test_the_action_after_a_ready_poll_runs_in_the_polls_request(inline: bool) -> None:
    h = Harness(registration(lambda ctx: {"entity": "e-1"}), limits=Limits(continue_inline=inline))
    flow_id = h.start("reg", {})
    record = h.run(flow_id)

    assert record is not None and record.status is Status.SUCCEEDED
    assert [c.step for c in h.calls_of("create_entity")] == ["create_entity"]
    polls = record.polls
    assert polls == 3
    assert [e.poll for e in record.history if e.step == "await_active"] == [0, 1, 2]
    # create (which claims register for its first dispatch), register's commit, the ready poll
    # (the two not-ready ones wrote nothing: their task chain carried what they saw),
    # create_entity's (claim and) commit
    assert h.store.writes == (1 + 3 if inline else 1 + 4)
    tasks = len(h.queue.spent)  # register, the polls, and create_entity unless inline
    assert tasks == (1 + polls if inline else 2 + polls)


def test_an_inline_step_that_dies_is_delivered_as_its_own_task_with_the_same_key() -> None:
    called_at: list[Any] = []

    def finish(ctx: StepContext) -> dict[str, Any]:
        called_at.append(ctx.clock())
        if len(called_at) == 1:
            raise Crash()  # the poll's request dies running it
        return {"entity": "e-1"}

    h = Harness(registration(finish), limits=Limits(continue_inline=True, claim_lease_s=60))
    record = h.run(h.start("reg", {}))

    assert record is not None and record.status is Status.SUCCEEDED
    calls = h.calls_of("create_entity")
    assert len(calls) == 2
    assert calls[0].idempotency_key == calls[1].idempotency_key
    assert len(h.failed_deliveries) == 1  # the poll's request, which died running it
    # the task made for it waited out the dead request's claim
    assert called_at[1] - called_at[0] >= timedelta(seconds=60)


def test_an_inline_step_that_always_dies_counts_each_try_and_ends_the_flow() -> None:
    h = Harness(registration(scripted(Crash())), limits=Limits(continue_inline=True))
    record = h.run(h.start("reg", {}))

    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "HANDLER_CRASHED"
    assert len(h.calls_of("create_entity")) == 3  # its max_attempts, the inline try included


def test_an_inline_step_gets_no_more_time_than_the_request_it_runs_in_has_left() -> None:
    seen: list[StepContext] = []

    def finish(ctx: StepContext) -> dict[str, Any]:
        seen.append(ctx)
        return {"entity": "e-1"}

    limits = Limits(continue_inline=True, action_budget_s=100.0, poll_budget_s=40.0)
    h = Harness(registration(finish), limits=limits)
    h.run(h.start("reg", {}))

    (ctx,) = seen
    assert ctx.deadline - ctx.clock() <= timedelta(seconds=40.0)


def test_a_duplicate_of_the_poll_that_went_on_changes_nothing() -> None:
    h = Harness(
        registration(lambda ctx: {"entity": "e-1"}),
        limits=Limits(continue_inline=True),
        duplicate_deliveries=True,
    )
    record = h.run(h.start("reg", {}))

    assert record is not None and record.status is Status.SUCCEEDED
    assert len(h.calls_of("create_entity")) == 1
    assert len(h.results()) == 1
