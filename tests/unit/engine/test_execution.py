"""relayflow.core.engine.execution: a handler's call — what it is told, how its ending is
classified (invariant 7: not ready, retryable, permanent, a bug, an output the document cannot
hold, which fails the flow once), and the middleware that wraps every call, outermost first."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from relayflow.core import planner
from relayflow.core.engine import Ran
from relayflow.core.engine.execution import (
    MAX_OUTPUT_BYTES,
    Call,
    Execution,
    Next,
    completed,
    outcome_name,
    run_handler,
    token_of,
)
from relayflow.core.engine.kernel import Kernel, Limits
from relayflow.core.errors import NotReady, PermanentError, RetryableError
from relayflow.core.flows import ActionStep, Flow, Handler, PollStep, StepContext
from relayflow.core.metrics import Metrics
from relayflow.core.planner import Completed, Failed, Outcome, Retry, Waiting
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import Effect, FlowRecord, Track
from relayflow.core.state import Status

from .support import INCARNATION, NOW, Harness, kernel_over

CONTEXT = StepContext(
    flow_id="1001", flow="demo", step="reserve", input={}, outputs={}, idempotency_key="k"
)


def demo(reserve: Handler, check: Handler | None = None) -> Flow:
    return Flow(
        name="demo",
        steps=(
            ActionStep("reserve", reserve, compensate=lambda ctx: {}),
            PollStep("await_ready", check or (lambda ctx: {})),
        ),
    )


def started(kernel: Kernel, flow: Flow, **kw: Any) -> FlowRecord:
    record = planner.new_record(
        kernel.plan(flow), flow_id="1001", input={"resource": "acme-1"}, message_id="m-1",
        deadline_s=None, **kw,
    )  # fmt: skip
    return record.focused("reserve")


def ran(handler: Handler) -> Outcome:
    kernel = kernel_over()
    return run_handler(Call(started(kernel, demo(handler)), handler, CONTEXT, None))


def raising(error: BaseException) -> Handler:
    def handler(ctx: StepContext) -> dict[str, Any]:
        raise error

    return handler


def test_a_handler_that_says_not_ready_is_waiting_and_logged_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    signal = NotReady("still pending", delay_s=5)
    with caplog.at_level(logging.INFO, logger="relayflow.core.engine"):
        assert ran(raising(signal)) == Waiting(signal)
    (line,) = caplog.records
    assert (line.levelno, line.getMessage()) == (logging.INFO, "not ready")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (RetryableError("503", code="HTTP_503"), Retry),
        (PermanentError("refused", code="REFUSED"), Failed),
    ],
)
def test_a_step_error_is_classified_by_its_family_and_logged_as_a_warning(
    error: Exception, outcome: type, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="relayflow.core.engine"):
        assert ran(raising(error)) == outcome(error)
    assert [line.levelno for line in caplog.records] == [logging.WARNING]


def test_an_unexpected_exception_is_retried_as_unexpected_and_logged_with_its_trace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="relayflow.core.engine"):
        outcome = ran(raising(KeyError("sku")))
    assert isinstance(outcome, Retry)
    assert (outcome.error.code, outcome.error.message) == ("UNEXPECTED", "KeyError: 'sku'")
    (line,) = caplog.records
    assert line.levelno == logging.ERROR and line.exc_info is not None


def test_an_exception_that_is_not_an_error_passes_through() -> None:
    with pytest.raises(SystemExit):
        ran(raising(SystemExit("killed mid-handler")))


def test_a_handler_that_returns_a_dict_or_nothing_completed() -> None:
    assert ran(lambda ctx: {"reservation": "r-1"}) == Completed({"reservation": "r-1"})
    assert ran(lambda ctx: None) == Completed({})


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (["r-1"], "output of reserve is a list; a handler returns a dict or None"),
        ({"at": {1, 2}}, "output of reserve.at is a set, not a JSON value"),
        (
            {"blob": "x" * MAX_OUTPUT_BYTES},
            f"bytes; the limit is {MAX_OUTPUT_BYTES}",
        ),
    ],
    ids=["not-a-dict", "not-json", "too-large"],
)
def test_an_output_the_flow_document_cannot_hold_fails_the_step_for_good(
    output: Any, says: str
) -> None:
    outcome = ran(lambda ctx: output)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "INVALID_OUTPUT" and says in outcome.error.message


def test_an_output_is_checked_where_it_came_from() -> None:
    outcome = completed("done", where="the callback's output")
    assert isinstance(outcome, Failed)
    assert outcome.error.message == (
        "the callback's output is a str; a handler returns a dict or None"
    )
    assert completed({"ok": True}, where="x") == Completed({"ok": True})


def recording(name: str, seen: list[str]) -> Any:
    def middleware(call: Call, then: Next) -> Outcome:
        seen.append(f"{name} before")
        outcome = then(call)
        seen.append(f"{name} after {outcome_name(outcome)}")
        return outcome

    return middleware


def test_middleware_wraps_the_handler_call_outermost_first() -> None:
    seen: list[str] = []

    def reserve(ctx: StepContext) -> dict[str, Any]:
        seen.append("handler")
        return {}

    kernel = kernel_over()
    flow = demo(reserve)
    chain = [recording("outer", seen), recording("middle", seen), recording("inner", seen)]
    outcome = Execution(kernel, chain).execute(flow, started(kernel, flow))
    assert outcome == Completed({})
    assert seen == [
        "outer before",
        "middle before",
        "inner before",
        "handler",
        "inner after completed",
        "middle after completed",
        "outer after completed",
    ]


def test_a_middleware_that_answers_itself_runs_nothing_inside_it() -> None:
    seen: list[str] = []
    refused = Retry(RetryableError("not now", code="SHED"))

    def reserve(ctx: StepContext) -> dict[str, Any]:
        seen.append("handler")
        return {}

    kernel = kernel_over()
    flow = demo(reserve)
    chain = [recording("outer", seen), lambda call, then: refused, recording("inner", seen)]
    assert Execution(kernel, chain).execute(flow, started(kernel, flow)) is refused
    assert seen == ["outer before", "outer after retry"]


def test_a_handler_is_told_its_flow_its_try_its_key_and_its_budget() -> None:
    kernel = kernel_over()
    flow = demo(lambda ctx: {})
    record = started(kernel, flow, tenant="acme")
    assert record.key == "acme~1001"
    ctx = Execution(kernel).context(flow, record)
    assert (ctx.flow_id, ctx.flow, ctx.step, ctx.input) == (
        "1001",  # the caller's id, not the key
        "demo",
        "reserve",
        {"resource": "acme-1"},
    )
    assert (ctx.attempt, ctx.poll, ctx.generation, ctx.version) == (0, 0, 0, 1)
    assert ctx.idempotency_key == ctx.action_key == f"relayflow-acme~1001-{INCARNATION}-reserve-e0"
    assert ctx.deadline == NOW + timedelta(seconds=Limits().action_budget_s)
    assert ctx.clock() == NOW
    short = Execution(kernel).context(flow, record, budget_s=7.0)
    assert short.deadline == NOW + timedelta(seconds=7)


def test_a_poll_has_the_poll_queues_budget() -> None:
    kernel = kernel_over()
    flow = demo(lambda ctx: {})
    polling = planner.after(kernel.plan(flow), started(kernel, flow), Completed({"r": 1}))
    ctx = Execution(kernel).context(flow, polling.focused("await_ready"))
    assert ctx.step == "await_ready" and ctx.outputs == {"reserve": {"r": 1}}
    assert ctx.deadline == NOW + timedelta(seconds=Limits().poll_budget_s)


def test_an_undo_is_told_what_its_action_answered_and_the_key_the_action_sent() -> None:
    kernel = kernel_over()
    flow = demo(lambda ctx: {})
    record = started(kernel, flow)
    undo = record.position.model_copy(update={"kind": TaskKind.COMPENSATE})
    effect = Effect(step="reserve", at=NOW, output={"reservation": "r-9"}, token="t-1")
    undoing = record.model_copy(update={"position": undo, "effects": [effect]})
    ctx = Execution(kernel).context(flow, undoing)
    assert ctx.outputs["reserve"] == {"reservation": "r-9"}
    assert ctx.idempotency_key.endswith("-reserve-e0:undo")
    assert ctx.action_key.endswith("-reserve-e0")
    assert ctx.callback_token == "t-1"


def test_the_callback_token_is_the_steps_or_for_an_undo_the_one_its_run_sent() -> None:
    run = Position(step_index=0, step="hook", kind=TaskKind.ACTION)
    undo = run.model_copy(update={"kind": TaskKind.COMPENSATE})
    track = Track(position=run, started_at=NOW, token="now")
    sent = Effect(step="hook", at=NOW, token="then")
    assert token_of(track, sent, run) == "now"
    assert token_of(track, sent, undo) == "then"
    assert token_of(None, None, run) == token_of(track, None, undo) == ""


class Recorded(Metrics):
    def __init__(self) -> None:
        self.ran: list[tuple[str, str, str]] = []
        self.retried: list[tuple[str, str, str]] = []

    def step_ran(self, flow: str, position: Position, outcome: str, duration_s: float) -> None:
        assert duration_s >= 0
        self.ran.append((flow, position.step, outcome))

    def step_retried(self, flow: str, step: str, code: str) -> None:
        self.retried.append((flow, step, code))


@pytest.mark.parametrize(
    ("handler", "ran", "retried"),
    [
        (lambda ctx: {}, "completed", []),
        (
            raising(RetryableError("503", code="HTTP_503")),
            "retry",
            [("demo", "reserve", "HTTP_503")],
        ),
        (raising(PermanentError("no")), "failed", []),
    ],
    ids=["completed", "retry", "failed"],
)
def test_each_call_is_timed_by_its_outcome_and_retries_are_counted_by_code(
    handler: Handler, ran: str, retried: list[tuple[str, str, str]]
) -> None:
    metrics = Recorded()
    kernel = kernel_over(metrics=metrics)
    flow = demo(handler)
    plain = Execution(kernel)
    Execution(kernel, (plain.counted, plain.timed)).execute(flow, started(kernel, flow))
    assert metrics.ran == [("demo", "reserve", ran)]
    assert metrics.retried == retried


def test_each_call_is_a_span_named_by_its_task_and_a_failure_marks_it() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    kernel = kernel_over()
    kernel.tracer = provider.get_tracer("test")
    flow = demo(raising(PermanentError("refused by the client")))
    plain = Execution(kernel)
    Execution(kernel, (plain.traced,)).execute(flow, started(kernel, flow))
    (span,) = exporter.get_finished_spans()
    assert span.name == "action reserve"
    assert dict(span.attributes or {}) == {
        "flow_id": "1001",
        "flow": "demo",
        "step": "reserve",
        "kind": "action",
        "attempt": 0,
        "poll": 0,
        "generation": 0,
        "outcome": "failed",
    }
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR,
        "refused by the client",
    )


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (["not", "a", "dict"], "output of reserve is a list"),
        ({"when": datetime(2026, 1, 1)}, "output of reserve.when is a datetime"),
        ({"n": 2**70}, "output of reserve.n is an integer outside 64 bits"),
        ({"__name__": 1}, "reserved key '__name__'"),
        ({"x": float("nan")}, "output of reserve.x is nan"),
        ({"blob": "x" * 300_000}, "the limit is 262144"),
    ],
)
def test_an_output_the_flow_document_cannot_hold_fails_the_flow_once(
    h: Harness, output: Any, says: str
) -> None:
    # given a step handler whose output Firestore could not store
    h.reserve.script = [lambda ctx: output]
    h.start()
    # when its task runs, then the flow FAILS at once with the reason (no retry, no 5xx loop)
    assert h.deliver() is Ran.ADVANCED
    record = h.record()
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "INVALID_OUTPUT"
    assert says in record.result.message
    assert len(h.reserve.calls) == 1
