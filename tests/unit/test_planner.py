"""relayflow.core.planner: what a flow does next, decided from (definition, record, outcome, now).

The flow under test is ``reserve`` (action, compensated) -> ``await_ready`` (poll) -> ``finish``
(action). Time is a fixed ``NOW`` that each test moves explicitly.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relayflow.core import planner
from relayflow.core.backoff import Jitter
from relayflow.core.errors import InvalidTransition, NotReady, PermanentError, RetryableError
from relayflow.core.flows import ActionStep, Flow, PollPolicy, PollStep, RetryPolicy, StepContext
from relayflow.core.kinds import REGISTRY
from relayflow.core.kinds.poll import poll_deadline
from relayflow.core.planner import Completed, Failed, Plan, QueueNames, Retry, Waiting
from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FLOW_ID = "acme-1"
QUEUES = QueueNames(steps="q-steps", polls="q-polls")
POLL_KEY = f"{FLOW_ID}:await_ready"
RETRY = RetryPolicy(max_attempts=3, initial_s=1.0, multiplier=2.0, max_interval_s=10.0, jitter=0)
POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=30.0, max_polls=50, deadline_s=900)
NO_JITTER = PollPolicy(
    initial_s=1.0, multiplier=2.0, max_interval_s=30.0, jitter_mode=Jitter.NONE, deadline_s=900
)


def _noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def make_flow(*, poll: PollPolicy = POLL, compensate: bool = True) -> Flow:
    return Flow(
        name="demo",
        steps=(
            ActionStep("reserve", _noop, retry=RETRY, compensate=_noop if compensate else None),
            PollStep("await_ready", _noop, policy=poll),
            ActionStep("finish", _noop, retry=RETRY),
        ),
    )


FLOW = make_flow()


def plan(at: datetime = NOW, *, flow: Flow = FLOW, history_limit: int = 200) -> Plan:
    return Plan(definition=flow, queues=QUEUES, now=at, kinds=REGISTRY, history_limit=history_limit)


def started(*, flow: Flow = FLOW, deadline_s: float | None = None, **kw: Any) -> FlowRecord:
    return planner.new_record(
        plan(flow=flow, **kw), flow_id=FLOW_ID, input={"resource": "acme-1"}, message_id="m-1",
        deadline_s=deadline_s,
    )  # fmt: skip


def at_poll(*, flow: Flow = FLOW, deadline_s: float | None = None) -> FlowRecord:
    """The flow after ``reserve`` succeeded at NOW: polling ``await_ready`` from NOW."""
    record = started(flow=flow, deadline_s=deadline_s)
    return planner.after(plan(flow=flow), record, Completed({"reservation": "r-1"}))


def at_finish(*, flow: Flow = FLOW) -> FlowRecord:
    """The flow after ``await_ready`` became ready at NOW: about to run ``finish``."""
    return planner.after(plan(flow=flow), at_poll(flow=flow), Completed({"state": "READY"}))


def not_ready(detail: str = "still pending", delay_s: float | None = None) -> Waiting:
    return Waiting(NotReady(detail, delay_s=delay_s))


# -- new_record -------------------------------------------------------------------------------


def test_a_new_flow_is_pending_at_its_first_step_with_its_first_task_due_now() -> None:
    record = started()
    assert record.status is Status.PENDING
    assert record.position == Position(step_index=0, step="reserve", kind=TaskKind.ACTION)
    assert record.next is not None
    assert record.next.queue == "q-steps"
    assert record.next.run_at == NOW
    assert record.next.position == record.position
    assert record.next.task_id == task_id(FLOW_ID, record.position)
    assert record.next_run_at == NOW
    assert record.deadline_at is None
    assert (record.message_id, record.input) == ("m-1", {"resource": "acme-1"})
    assert record.history == []


def test_a_new_flow_with_a_deadline_records_when_it_ends() -> None:
    assert started(deadline_s=60).deadline_at == NOW + timedelta(seconds=60)


# -- success ----------------------------------------------------------------------------------


def test_success_advances_to_the_next_step_due_now_on_its_queue() -> None:
    # given a new flow, when its first action succeeds
    record = planner.after(plan(), started(), Completed({"reservation": "r-1"}))
    # then it runs, at the poll step, whose first poll is due now on the polls queue
    assert record.status is Status.RUNNING
    assert record.position == Position(step_index=1, step="await_ready", kind=TaskKind.POLL)
    assert record.outputs == {"reserve": {"reservation": "r-1"}}
    assert record.next is not None
    assert (record.next.queue, record.next.run_at) == ("q-polls", NOW)
    assert record.next.task_id == task_id(FLOW_ID, record.position)
    assert record.step_started_at == NOW
    assert record.history[-1].outcome == "succeeded"


def test_a_ready_poll_advances_to_the_next_action_on_the_steps_queue() -> None:
    record = at_finish()
    assert record.position.step == "finish"
    assert record.position.kind is TaskKind.ACTION
    assert record.next is not None and record.next.queue == "q-steps"
    assert record.history[-1].outcome == "ready"


def test_success_of_the_last_step_succeeds_the_flow_with_its_final_output() -> None:
    done = planner.after(plan(), at_finish(), Completed({"entity": "e-1"}))
    assert done.status is Status.SUCCEEDED
    assert done.result is not None
    assert done.result.status is Status.SUCCEEDED
    assert done.result.code == "OK"
    assert done.result.data == {"entity": "e-1"}
    assert done.outputs == {
        "reserve": {"reservation": "r-1"},
        "await_ready": {"state": "READY"},
        "finish": {"entity": "e-1"},
    }
    assert done.result.error is None
    assert (done.next, done.next_run_at, done.finished_at) == (None, None, NOW)


def test_a_one_step_flow_goes_from_pending_to_succeeded() -> None:
    flow = Flow(name="single", steps=(ActionStep("only", _noop),))
    done = planner.after(plan(flow=flow), started(flow=flow), Completed({"x": 1}))
    assert done.status is Status.SUCCEEDED


# -- retryable errors -------------------------------------------------------------------------


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


# -- permanent errors and compensation --------------------------------------------------------


def test_a_permanent_error_at_the_first_step_fails_the_flow_with_nothing_to_compensate() -> None:
    failed = planner.after(plan(), started(), Failed(PermanentError("bad input", code="BAD")))
    assert failed.status is Status.FAILED
    assert failed.result is not None
    assert (failed.result.code, failed.result.message) == ("BAD", "bad input")
    assert failed.result.error == {
        "code": "BAD",
        "message": "bad input",
        "step": "reserve",
        "attempt": 0,
    }
    assert failed.next is None
    assert failed.finished_at == NOW


def test_a_permanent_error_later_compensates_then_fails_with_the_original_error() -> None:
    error = PermanentError("entity rejected", code="ENTITY_REJECTED")
    compensating = planner.after(plan(), at_finish(), Failed(error))
    assert compensating.status is Status.COMPENSATING
    assert compensating.position.step_index == 0
    assert compensating.position.kind is TaskKind.COMPENSATE
    assert compensating.result is None
    failed = planner.after(plan(), compensating, Completed({}))
    assert failed.status is Status.FAILED
    assert failed.result is not None
    assert (failed.result.code, failed.result.message) == ("ENTITY_REJECTED", "entity rejected")
    assert "compensation_failures" not in (failed.result.error or {})
    assert [h.outcome for h in failed.history[-2:]] == ["failed", "compensated"]


def test_a_failed_compensation_still_ends_the_flow_and_says_which_step_was_not_undone() -> None:
    compensating = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    failed = planner.after(plan(), compensating, Failed(PermanentError("cannot undo")))
    assert failed.status is Status.FAILED
    assert failed.result is not None and failed.result.error is not None
    assert failed.result.error["compensation_failures"] == ["reserve"]
    assert failed.history[-1].outcome == "compensation failed"


def test_a_retryable_compensation_error_retries_the_compensation() -> None:
    compensating = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    again = planner.after(plan(), compensating, Retry(RetryableError("busy", retry_after_s=4)))
    assert again.status is Status.COMPENSATING
    assert again.position.kind is TaskKind.COMPENSATE
    assert again.position.attempt == 1
    assert again.next is not None and again.next.run_at == NOW + timedelta(seconds=4)


def test_without_a_compensation_handler_a_later_failure_ends_the_flow_directly() -> None:
    flow = make_flow(compensate=False)
    failed = planner.after(plan(flow=flow), at_finish(flow=flow), Failed(PermanentError("no")))
    assert failed.status is Status.FAILED


# -- polling ----------------------------------------------------------------------------------


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


def test_an_action_that_raises_not_ready_fails_for_good() -> None:
    failed = planner.after(plan(), started(), not_ready())
    assert failed.status is Status.FAILED
    assert failed.result is not None and failed.result.code == "NOT_READY_IN_ACTION"


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


# -- history ----------------------------------------------------------------------------------


def test_history_is_bounded_and_counts_what_it_dropped() -> None:
    # given a history limit of 3
    record, now = at_poll(), NOW
    # when the flow logs 1 success and 4 polls (5 entries)
    for _ in range(4):
        record = planner.after(plan(now, history_limit=3), record, not_ready())
        assert record.next is not None
        now = record.next.run_at
    # then the 3 newest are kept and 2 are counted as dropped
    assert [h.poll for h in record.history] == [1, 2, 3]
    assert record.history_dropped == 2
    assert record.polls == 4


# -- operator actions -------------------------------------------------------------------------


def test_cancel_compensates_completed_steps_then_ends_cancelled() -> None:
    # given a flow polling after ``reserve`` (which can be undone) completed
    cancelling = planner.cancel(plan(), at_poll(), "operator said so")
    assert cancelling.status is Status.COMPENSATING
    assert (cancelling.position.step, cancelling.position.kind) == ("reserve", TaskKind.COMPENSATE)
    # when the compensation succeeds, then the flow ends CANCELLED
    cancelled = planner.after(plan(), cancelling, Completed({}))
    assert cancelled.status is Status.CANCELLED
    assert cancelled.result is not None and cancelled.result.code == "CANCELLED"


def test_a_compensating_flow_cannot_be_cancelled() -> None:
    cancelling = planner.cancel(plan(), at_poll(), "first")
    with pytest.raises(InvalidTransition, match="compensating"):
        planner.cancel(plan(), cancelling, "second")


@pytest.mark.parametrize("record", [started()], ids=["pending"])
def test_cancel_ends_an_active_flow_as_cancelled(record: FlowRecord) -> None:
    cancelled = planner.cancel(plan(), record, "operator said so")
    assert cancelled.status is Status.CANCELLED
    assert cancelled.result is not None
    assert cancelled.result.code == "CANCELLED"
    assert cancelled.result.message == "operator said so"
    assert cancelled.next is None
    assert cancelled.history[-1].outcome == "cancelled"


def test_cancel_refuses_a_flow_that_has_ended() -> None:
    done = planner.after(plan(), at_finish(), Completed({}))
    with pytest.raises(InvalidTransition):
        planner.cancel(plan(), done, "too late")


def test_restart_resumes_a_failed_flow_at_the_failed_step_as_a_new_generation() -> None:
    flow = make_flow(compensate=False)
    failed = planner.after(plan(flow=flow), at_poll(flow=flow), Failed(PermanentError("no")))
    later = NOW + timedelta(hours=1)
    again = planner.restart(plan(later, flow=flow), failed)
    assert again.status is Status.PENDING
    assert again.position == Position(
        generation=1, step_index=1, step="await_ready", kind=TaskKind.POLL
    )
    assert again.outputs == {"reserve": {"reservation": "r-1"}}
    assert (again.result, again.finished_at, again.result_published) == (None, None, False)
    assert again.step_started_at == later
    assert again.next is not None
    assert again.next.run_at == later
    assert again.next.task_id != task_id(FLOW_ID, failed.position)


def test_restart_after_compensation_starts_over_without_outputs() -> None:
    compensating = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    failed = planner.after(plan(), compensating, Completed({}))
    again = planner.restart(plan(), failed)
    assert again.position == Position(
        generation=1, step_index=0, step="reserve", kind=TaskKind.ACTION
    )
    assert again.outputs == {}


def test_restart_after_an_earlier_generation_compensated_keeps_this_generations_outputs() -> None:
    # given generation 0 failed and was compensated, and generation 1 redid ``reserve`` and
    # then failed at await_ready with its compensation failing (so r-2 was not undone)
    compensating = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    gen1 = planner.restart(plan(), planner.after(plan(), compensating, Completed({})))
    gen1 = planner.after(plan(), gen1, Completed({"reservation": "r-2"}))
    gen1 = planner.after(plan(), gen1, Failed(PermanentError("broken")))
    gen1 = planner.after(plan(), gen1, Failed(PermanentError("cannot undo")))
    assert gen1.status is Status.FAILED
    # when it is restarted
    again = planner.restart(plan(), gen1)
    # then generation 0's compensation does not make it start over and drop r-2
    assert again.position.generation == 2
    assert again.outputs["reserve"] == {"reservation": "r-2"}


@pytest.mark.parametrize(
    "record",
    [started(), at_poll(), planner.after(plan(), at_finish(), Completed({}))],
    ids=["pending", "running", "succeeded"],
)
def test_restart_refuses_a_flow_that_has_not_failed(record: FlowRecord) -> None:
    with pytest.raises(InvalidTransition):
        planner.restart(plan(), record)


def test_rescue_replaces_a_lost_task_under_a_new_name_due_now() -> None:
    polling = planner.after(plan(), at_poll(), not_ready())
    assert polling.next is not None
    later = polling.next.run_at + timedelta(minutes=5)
    rescued = planner.rescue(plan(later), polling)
    assert rescued.status is polling.status
    assert rescued.position == polling.position.model_copy(update={"rescue": 1})
    assert rescued.next is not None
    assert rescued.next.run_at == later
    assert rescued.next.task_id != polling.next.task_id
    assert rescued.history[-1].outcome == "rescued"
    assert (rescued.polls, rescued.attempts) == (polling.polls, polling.attempts)


# -- illegal transitions ----------------------------------------------------------------------


def test_planning_on_a_terminal_record_is_refused() -> None:
    failed = planner.after(plan(), started(), Failed(PermanentError("no")))
    with pytest.raises(InvalidTransition):
        planner.after(plan(), failed, Completed({}))


def test_a_finished_flow_expires_after_the_retention_period() -> None:
    # given a flow at its last step, and a plan that keeps finished flows for one day
    record = at_finish()
    one_day = Plan(
        definition=FLOW, queues=QueueNames(), now=NOW, kinds=REGISTRY, retention_s=86400.0
    )

    # when the last step succeeds, then the doc carries the TTL field Terraform's policy reads
    done = planner.after(one_day, record, Completed({"ok": True}))
    assert done.expire_at == NOW + timedelta(days=1)
    assert record.expire_at is None  # an active flow never expires


def test_a_huge_retry_after_is_honoured_only_up_to_an_hour() -> None:
    retried = planner.after(plan(), started(), Retry(RetryableError("busy", retry_after_s=1e9)))
    assert retried.next is not None
    assert retried.next.run_at == NOW + timedelta(seconds=planner.MAX_RETRY_AFTER_S)


def test_cancel_waits_for_a_running_step_to_commit() -> None:
    # given a delivery holds the claim on the current step
    claimed = planner.claim(plan(), at_poll(), lease_s=60, holder="delivery-1")
    # when an operator cancels, then it is refused until the step commits (or the lease ends)
    with pytest.raises(InvalidTransition, match="is running"):
        planner.cancel(plan(), claimed, "stop")
    later = plan(NOW + timedelta(seconds=61))
    assert planner.cancel(later, claimed, "stop").status is Status.COMPENSATING
