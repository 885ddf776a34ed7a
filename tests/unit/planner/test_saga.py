"""relayflow.core.planner.saga: a permanent error undoes what the flow did, newest first, then
ends it.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core import planner
from relayflow.core.errors import PermanentError, RetryableError
from relayflow.core.planner import Completed, Failed, Retry
from relayflow.core.position import TaskKind
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, at_finish, make_flow, plan, started


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
