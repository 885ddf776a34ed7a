"""relayflow.core.kinds.poll: a poll not ready polls again on its backoff, up to its deadline
and max_polls.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from relayflow.core import planner
from relayflow.core.errors import RetryableError
from relayflow.core.flows import Flow, PollPolicy, PollStep
from relayflow.core.kinds.poll import poll_deadline
from relayflow.core.planner import Completed, Retry
from relayflow.core.position import TaskKind, task_id
from relayflow.core.state import Status
from tests.unit.planner.sample import (
    FLOW,
    FLOW_ID,
    NO_JITTER,
    NOW,
    POLL,
    POLL_KEY,
    at_poll,
    make_flow,
    not_ready,
    plan,
)


def test_a_poll_that_is_not_ready_schedules_the_next_poll_at_the_jittered_delay() -> None:
    # given the flow is polling, when the first poll says not ready
    record = planner.after(plan(), at_poll(), not_ready("registration is PENDING"))
    # then poll 1 is due exactly PollPolicy.delay_s(n=0) from now, keyed by flow and step
    delay = POLL.delay_s(n=0, key=POLL_KEY)
    assert delay != 1.0  # the jitter is in play
    assert record.position.poll == 1
    assert record.position.kind is TaskKind.POLL
    assert record.next is not None
    assert record.next.queue == "q-polls"
    assert record.next.run_at == NOW + timedelta(seconds=delay)
    assert record.next.task_id == task_id(FLOW_ID, record.position)
    entry = record.history[-1]
    assert (entry.poll, entry.delay_s) == (0, round(delay, 3))
    assert entry.outcome == "not ready: registration is PENDING"
    assert record.polls == 1


def test_consecutive_polls_follow_the_jittered_backoff_curve() -> None:
    record, now = at_poll(), NOW
    for n in range(8):
        record = planner.after(plan(now), record, not_ready())
        assert record.next is not None
        expected = POLL.delay_s(n=n, key=POLL_KEY)
        assert record.next.run_at == now + timedelta(seconds=expected)
        now = record.next.run_at
    assert record.position.poll == 8


def test_without_jitter_consecutive_polls_wait_exactly_one_two_four_then_the_cap() -> None:
    flow = make_flow(poll=NO_JITTER)
    record, now, waits = at_poll(flow=flow), NOW, []
    for _ in range(7):
        record = planner.after(plan(now, flow=flow), record, not_ready())
        assert record.next is not None
        waits.append((record.next.run_at - now).total_seconds())
        now = record.next.run_at
    assert waits == [1, 2, 4, 8, 16, 30, 30]


def test_a_not_ready_hint_can_lengthen_the_wait() -> None:
    record = planner.after(plan(), at_poll(), not_ready(delay_s=12.0))
    assert record.next is not None and record.next.run_at == NOW + timedelta(seconds=12)


def test_a_retryable_error_while_polling_polls_again() -> None:
    record = planner.after(plan(), at_poll(), Retry(RetryableError("503", retry_after_s=9)))
    assert record.status is Status.RUNNING
    assert record.position.poll == 1
    assert record.next is not None and record.next.run_at == NOW + timedelta(seconds=9)


def test_the_last_wait_is_cut_short_to_land_exactly_on_the_deadline() -> None:
    # given a 20 s poll deadline without jitter: polls at 0, 1, 3, 7, 15 s
    flow = make_flow(poll=PollPolicy(initial_s=1, multiplier=2, jitter=0, deadline_s=20))
    record, now = at_poll(flow=flow), NOW
    for _ in range(4):
        record = planner.after(plan(now, flow=flow), record, not_ready())
        assert record.next is not None
        now = record.next.run_at
    assert now == NOW + timedelta(seconds=15)
    # when the poll at 15 s is not ready, the nominal 16 s wait would overshoot
    record = planner.after(plan(now, flow=flow), record, not_ready())
    # then the next poll lands on the deadline itself
    assert record.next is not None
    assert record.next.run_at == NOW + timedelta(seconds=20)
    assert record.history[-1].delay_s == 5.0
    assert poll_deadline(plan(flow=flow), record) == NOW + timedelta(seconds=20)


@pytest.mark.parametrize("late_s", [0, 3])
def test_not_ready_at_or_after_the_deadline_times_out(late_s: float) -> None:
    flow = make_flow(poll=PollPolicy(deadline_s=20), compensate=False)
    at = NOW + timedelta(seconds=20 + late_s)
    record = planner.after(plan(at, flow=flow), at_poll(flow=flow), not_ready("PENDING"))
    assert record.status is Status.TIMED_OUT
    assert record.result is not None
    assert record.result.status is Status.TIMED_OUT
    assert record.result.code == "DEADLINE_EXCEEDED"
    assert "not ready by the deadline" in record.result.message
    assert record.next is None


def test_a_timeout_compensates_and_still_ends_timed_out_not_failed() -> None:
    at = NOW + timedelta(seconds=900)
    compensating = planner.after(plan(at), at_poll(), not_ready())
    assert compensating.status is Status.COMPENSATING
    ended = planner.after(plan(at), compensating, Completed({}))
    assert ended.status is Status.TIMED_OUT
    assert ended.result is not None and ended.result.code == "DEADLINE_EXCEEDED"


def test_max_polls_times_out_with_max_polls_exceeded() -> None:
    flow = make_flow(poll=PollPolicy(max_polls=3), compensate=False)
    record, now = at_poll(flow=flow), NOW
    for expected_poll in (1, 2):
        record = planner.after(plan(now, flow=flow), record, not_ready())
        assert record.position.poll == expected_poll
        assert record.next is not None
        now = record.next.run_at
    record = planner.after(plan(now, flow=flow), record, not_ready())
    assert record.status is Status.TIMED_OUT
    assert record.result is not None
    assert record.result.code == "MAX_POLLS_EXCEEDED"
    assert record.result.error is not None and record.result.error["polls"] == 3


def test_the_flow_deadline_shortens_the_poll_deadline() -> None:
    # given a flow that must finish within 10 s while its poll step allows 900 s
    flow = make_flow(poll=NO_JITTER, compensate=False)
    record = at_poll(flow=flow, deadline_s=10)
    assert poll_deadline(plan(flow=flow), record) == NOW + timedelta(seconds=10)
    # when polls at 0, 1, 3 and 7 s are not ready, the fourth wait (8 s) is cut to 3 s
    now = NOW
    for _ in range(4):
        record = planner.after(plan(now, flow=flow), record, not_ready())
        assert record.next is not None
        now = record.next.run_at
    assert now == NOW + timedelta(seconds=10)
    # and at 10 s the flow times out
    record = planner.after(plan(now, flow=flow), record, not_ready())
    assert record.status is Status.TIMED_OUT


def test_a_poll_that_keeps_erroring_fails_at_the_deadline_instead_of_timing_out() -> None:
    # given a poll step whose check raises a retryable error every time
    record = at_poll()
    step = FLOW.steps[1]
    assert isinstance(step, PollStep)
    now = NOW
    while record.status is Status.RUNNING:
        assert record.next is not None
        now = record.next.run_at
        record = planner.after(plan(now), record, Retry(RetryableError("HTTP 500")))
    # then it kept polling until the deadline (errors do not end it by a count) and then
    # failed (after compensating), because the check itself was failing
    assert now == NOW + timedelta(seconds=step.policy.deadline_s)
    assert record.status is Status.COMPENSATING
    assert record.pending_result is not None
    assert (record.pending_result.status, record.pending_result.code) == (
        Status.FAILED,
        "POLL_ERRORS",
    )


def test_slow_down_answers_do_not_use_up_max_polls() -> None:
    # given a poll step allowed 3 polls, whose check is told to slow down 10 times
    flow = Flow(
        name="demo",
        steps=(PollStep("wait", lambda ctx: {}, policy=PollPolicy(max_polls=3, deadline_s=3600)),),
    )
    record = planner.new_record(
        plan(flow=flow), flow_id=FLOW_ID, input={}, message_id="m", deadline_s=None
    )
    for _ in range(10):
        assert record.next is not None
        busy = Retry(RetryableError("429", retry_after_s=30))
        record = planner.after(plan(record.next.run_at, flow=flow), record, busy)
    # then it is still polling, and waited as long as each Retry-After said
    assert record.status is Status.RUNNING
    assert record.poll_errors == 10
    assert [e.delay_s for e in record.history] == [30.0] * 10
    # and only not-ready answers count toward max_polls
    for _ in range(2):
        assert record.next is not None
        record = planner.after(plan(record.next.run_at, flow=flow), record, not_ready())
    assert record.status is Status.RUNNING
    assert record.next is not None
    record = planner.after(plan(record.next.run_at, flow=flow), record, not_ready())
    assert record.result is not None and record.result.code == "MAX_POLLS_EXCEEDED"


def test_a_not_ready_poll_resets_the_count_of_errors_in_a_row() -> None:
    errored = planner.after(plan(), at_poll(), Retry(RetryableError("HTTP 503")))
    assert errored.position.attempt == 1
    waiting = planner.after(plan(), errored, not_ready())
    assert waiting.position.attempt == 0
