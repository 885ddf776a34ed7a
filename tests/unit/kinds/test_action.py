"""relayflow.core.kinds.action: an action retried after a retryable error, along its retry
curve, until its tries are spent.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from relayflow.core import planner
from relayflow.core.errors import RetryableError
from relayflow.core.planner import MAX_RETRY_AFTER_S, Completed, Retry
from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.state import Status
from tests.unit.planner.sample import FLOW_ID, NOW, at_finish, not_ready, plan, started


def test_a_retryable_error_retries_the_same_step_after_the_retry_delay() -> None:
    # given the first action fails with a retryable error
    record = planner.after(plan(), started(), Retry(RetryableError("503 from api")))
    # then the same step runs again, attempt 1, after the first retry delay (1 s, no jitter)
    assert record.status is Status.RUNNING
    assert record.position == Position(
        step_index=0, step="reserve", kind=TaskKind.ACTION, attempt=1
    )
    assert record.next is not None
    assert record.next.run_at == NOW + timedelta(seconds=1)
    assert record.next.task_id == task_id(FLOW_ID, record.position)
    assert record.history[-1].outcome == "retryable error"
    assert record.history[-1].detail == "503 from api"
    assert record.history[-1].delay_s == 1.0


def test_the_second_retry_waits_along_the_retry_curve() -> None:
    once = planner.after(plan(), started(), Retry(RetryableError("x")))
    later = NOW + timedelta(seconds=1)
    twice = planner.after(plan(later), once, Retry(RetryableError("x")))
    assert twice.position.attempt == 2
    assert twice.next is not None and twice.next.run_at == later + timedelta(seconds=2)


@pytest.mark.parametrize(("retry_after_s", "expected_s"), [(7.0, 7.0), (0.5, 1.0), (None, 1.0)])
def test_retry_after_is_honoured_as_the_longer_of_both_waits(
    retry_after_s: float | None, expected_s: float
) -> None:
    error = RetryableError("429", retry_after_s=retry_after_s)
    record = planner.after(plan(), started(), Retry(error))
    assert record.next is not None
    assert record.next.run_at == NOW + timedelta(seconds=expected_s)


def test_exhausted_retries_at_the_first_step_fail_the_flow_directly() -> None:
    record = started()
    for attempt in range(3):
        record = planner.after(plan(), record, Retry(RetryableError(f"down {attempt}")))
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "RETRIES_EXHAUSTED"


def test_exhausted_retries_compensate_then_fail_with_retries_exhausted() -> None:
    # given the last step keeps failing with retryable errors
    record = at_finish()
    for attempt in range(3):
        record = planner.after(plan(), record, Retry(RetryableError(f"down {attempt}")))
    # then after max_attempts (3) the completed, compensable first step is undone first
    assert record.status is Status.COMPENSATING
    assert record.position == Position(step_index=0, step="reserve", kind=TaskKind.COMPENSATE)
    assert record.next is not None and record.next.queue == "q-steps"
    assert record.pending_result is not None
    assert record.pending_result.code == "RETRIES_EXHAUSTED"
    # and once compensated, the flow fails with that result
    failed = planner.after(plan(), record, Completed({}))
    assert failed.status is Status.FAILED
    assert failed.result is not None
    assert failed.result.code == "RETRIES_EXHAUSTED"
    assert failed.result.message == "3 attempts failed; last: down 2"
    assert failed.result.error is not None and failed.result.error["step"] == "finish"
    assert failed.pending_result is None and failed.next is None


def test_an_action_that_raises_not_ready_fails_for_good() -> None:
    failed = planner.after(plan(), started(), not_ready())
    assert failed.status is Status.FAILED
    assert failed.result is not None and failed.result.code == "NOT_READY_IN_ACTION"


def test_a_huge_retry_after_is_honoured_only_up_to_an_hour() -> None:
    retried = planner.after(plan(), started(), Retry(RetryableError("busy", retry_after_s=1e9)))
    assert retried.next is not None
    assert retried.next.run_at == NOW + timedelta(seconds=MAX_RETRY_AFTER_S)
