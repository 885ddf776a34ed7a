"""relayflow.telemetry: one flow is one trace, and logs name the trace they were written in.

Spans go to the SDK's InMemorySpanExporter through a tracer made for each test; the global
tracer provider is never touched. The engine runs over the in-memory fakes, with a queue and an
events port that keep the trace context a real TaskQueue and Events would send.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer

from relayflow import telemetry
from relayflow.core.clock import FakeClock
from relayflow.core.engine import Ran, Started
from relayflow.core.errors import NotReady, RetryableError
from relayflow.core.flows import ActionStep, Flow, PollPolicy, PollStep, RetryPolicy
from relayflow.core.ports import Enqueued
from relayflow.core.position import PollNote, Position, TaskKind
from relayflow.core.records import FlowRecord, NextTask, Result
from relayflow.core.state import Status
from relayflow.gcp.events import Events
from relayflow.gcp.queue import Target, TaskQueue
from relayflow.runtime import Runtime
from relayflow.settings import Settings
from relayflow.telemetry import Counters, JsonFormatter
from relayflow.topology import load_topology
from relayflow.web.services import task_app

from .fakes import FakeEvents, FakeQueue, FakeStore, ScriptedHandler, engine_over

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PUBLISHER_SPAN = "00f067aa0ba902b7"
PUBLISHED = f"00-{TRACE_ID}-{PUBLISHER_SPAN}-01"  # what a traced publisher attaches
START = json.dumps({"flow": "demo", "input": {"resource": "acme-1"}}).encode()
RETRY = RetryPolicy(max_attempts=3, initial_s=1.0, multiplier=2.0, max_interval_s=10.0, jitter=0)
POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=30.0, jitter=0, max_polls=5)


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def w3c_ids(traceparent: str | None) -> tuple[str, str]:
    """(trace id, span id) of a traceparent; its flags may also say the trace id is random."""
    assert traceparent is not None
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


class TracingQueue(FakeQueue):
    """A FakeQueue that also keeps, per task, the headers TaskQueue would send with it."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: dict[str, dict[str, str]] = {}

    def ensure(self, flow_id: str, nxt: NextTask, chain: Sequence[PollNote] = ()) -> Enqueued:
        self.headers.setdefault(nxt.task_id, telemetry.trace_headers())
        return super().ensure(flow_id, nxt, chain)


class TracingEvents(FakeEvents):
    """FakeEvents that also keeps the trace attributes Events would publish with each event."""

    def __init__(self) -> None:
        super().__init__()
        self.attributes: list[dict[str, str]] = []

    def publish_result(self, record: FlowRecord) -> str:
        self.attributes.append(telemetry.pubsub_trace_attributes())
        return super().publish_result(record)


class Harness:
    """``reserve`` (action) then ``await_ready`` (poll), delivered as Cloud Tasks would."""

    def __init__(self, tracer: Tracer | None) -> None:
        self.tracer = tracer
        self.store = FakeStore()
        self.queue = TracingQueue()
        self.events = TracingEvents()
        self.clock = FakeClock(NOW)
        self.reserve = ScriptedHandler([{"reservation": "r-1"}])
        self.await_ready = ScriptedHandler([NotReady("pending"), {"state": "READY"}])
        flow = Flow(
            name="demo",
            steps=(
                ActionStep("reserve", self.reserve, retry=RETRY),
                PollStep("await_ready", self.await_ready, policy=POLL),
            ),
        )
        self.engine = engine_over(
            flow,
            store=self.store,
            queue=self.queue,
            events=self.events,
            clock=self.clock,
            tracer=tracer,
        )

    def start(self, attributes: dict[str, str] | None = None) -> str:
        result = self.engine.start(START, message_id="1001", attributes=attributes or {})
        assert result.outcome is Started.STARTED and result.flow_id
        return result.flow_id

    def deliver(self, flow_id: str = "1001") -> Ran:
        """Dispatch the queued task in a server span whose parent is its traceparent header."""
        task = self.queue.only(flow_id)
        self.clock.advance(max((task.next.run_at - self.clock.now()).total_seconds(), 0))
        traceparent = self.queue.headers[task.next.task_id].get("traceparent")
        self.queue.take(task.next.task_id)
        with telemetry.span(self.tracer, "task", traceparent=traceparent, kind=SpanKind.SERVER):
            return self.engine.run_task(task.payload())

    def record(self, flow_id: str = "1001") -> FlowRecord:
        found = self.store.get(flow_id)
        assert found is not None
        return found


# -- extraction: the start message's traceparent -------------------------------------------


def test_the_start_span_continues_the_publishers_trace_and_the_flow_keeps_it(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    h = Harness(tracer)
    h.start({"googclient_traceparent": PUBLISHED, "origin": "test"})
    (start,) = named(exporter, "start flow")
    trace_id, span_id = hex_ids(start)
    assert (trace_id, parent_id(start)) == (TRACE_ID, PUBLISHER_SPAN)
    assert start.kind is SpanKind.CONSUMER
    assert start.attributes == {"message_id": "1001", "outcome": "started", "flow_id": "1001"}
    assert w3c_ids(h.record().trace) == (TRACE_ID, span_id)


def test_a_start_message_without_traceparent_begins_a_new_trace(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    h = Harness(tracer)
    h.start()
    (start,) = named(exporter, "start flow")
    trace_id, span_id = hex_ids(start)
    assert start.parent is None
    assert w3c_ids(h.record().trace) == (trace_id, span_id)


def test_a_malformed_traceparent_attribute_is_ignored(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    h = Harness(tracer)
    h.start({"googclient_traceparent": "not-a-traceparent"})
    (start,) = named(exporter, "start flow")
    assert start.parent is None
    assert h.record().trace is not None


def test_with_tracing_off_nothing_is_extracted_stored_or_injected() -> None:
    h = Harness(tracer=None)
    h.start({"googclient_traceparent": PUBLISHED})
    assert h.record().trace is None
    assert h.record().to_doc()["trace"] is None
    assert h.queue.headers == {h.queue.only().next.task_id: {}}
    h.deliver()
    h.deliver()
    h.deliver()
    assert h.record().status is Status.SUCCEEDED
    assert h.events.attributes == [{}]


# -- injection: task headers and the result event ------------------------------------------


class RecordingTasksClient:
    """The three CloudTasksClient methods TaskQueue.ensure uses; keeps the tasks created."""

    def __init__(self) -> None:
        self.created: list[Any] = []

    def queue_path(self, project: str, location: str, queue: str) -> str:
        return f"projects/{project}/locations/{location}/queues/{queue}"

    def task_path(self, project: str, location: str, queue: str, task: str) -> str:
        return f"{self.queue_path(project, location, queue)}/tasks/{task}"

    def create_task(self, *, request: Any, timeout: float) -> Any:
        self.created.append(request.task)
        return request.task


def task_queue(client: RecordingTasksClient) -> TaskQueue:
    return TaskQueue(
        client,  # type: ignore[arg-type]
        project="relayflow-test",
        location="us-central1",
        targets={"q-steps": Target("http://worker/tasks/step", "http://worker", 60)},
        service_account="tasks@relayflow-test.iam.gserviceaccount.com",
    )


NEXT = NextTask(
    queue="q-steps",
    task_id="abc-flow-1",
    run_at=NOW,
    position=Position(step_index=0, step="reserve", kind=TaskKind.ACTION),
)


def test_a_task_created_inside_a_span_carries_it_as_its_traceparent_header(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    client = RecordingTasksClient()
    with telemetry.span(tracer, "handler"):
        task_queue(client).ensure("flow-1", NEXT)
    (handler,) = exporter.get_finished_spans()
    trace_id, span_id = hex_ids(handler)
    headers = dict(client.created[0].http_request.headers)
    assert w3c_ids(headers["traceparent"]) == (trace_id, span_id)
    assert headers["Content-Type"] == "application/json"


def test_a_task_created_outside_any_span_has_no_traceparent_header() -> None:
    client = RecordingTasksClient()
    task_queue(client).ensure("flow-1", NEXT)
    assert dict(client.created[0].http_request.headers) == {"Content-Type": "application/json"}


class RecordingPublisher:
    def __init__(self) -> None:
        self.attributes: list[dict[str, str]] = []

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        self.attributes.append(attributes)
        done: Future[str] = Future()
        done.set_result("m-1")
        return done


def test_the_result_event_carries_the_current_span_as_googclient_traceparent(
    tracer: Tracer,
) -> None:
    h = Harness(tracer)
    h.start()
    publisher = RecordingPublisher()
    events = Events(publisher, project="relayflow-test", counters=Counters())
    result = Result(status=Status.SUCCEEDED, code="OK", message="done")
    finished = h.record().model_copy(update={"status": Status.SUCCEEDED, "result": result})
    with telemetry.joined(finished.trace):
        events.publish_result(finished)
    (attributes,) = publisher.attributes
    assert attributes == {
        "flow_id": "1001",
        "flow": "demo",
        "tenant": "default",
        "status": "SUCCEEDED",
        "generation": "0",
        "event": "result",
        "googclient_traceparent": finished.trace,
    }


# -- one flow, one trace -------------------------------------------------------------------


def test_every_task_and_the_result_publish_join_the_flows_trace(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    h = Harness(tracer)
    h.start({"googclient_traceparent": PUBLISHED})
    assert [h.deliver() for _ in range(3)] == [Ran.ADVANCED] * 3
    assert h.record().status is Status.SUCCEEDED
    spans = exporter.get_finished_spans()
    assert {hex_ids(s)[0] for s in spans} == {TRACE_ID}
    names = [s.name for s in spans]
    assert names.count("task") == 3
    assert "publish result" in names
    # Each task's server span is a child of the span that enqueued it: a causal chain.
    (start,) = named(exporter, "start flow")
    first_task = named(exporter, "task")[0]
    assert parent_id(first_task) == hex_ids(start)[1]
    (published,) = h.events.attributes
    (publish,) = named(exporter, "publish result")
    assert w3c_ids(published["googclient_traceparent"]) == hex_ids(publish)
    assert publish.kind is SpanKind.PRODUCER


def test_handler_spans_carry_the_position_and_the_outcome(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    h = Harness(tracer)
    h.start()
    for _ in range(3):
        h.deliver()
    reserve, *polls = (s for s in exporter.get_finished_spans() if "step" in (s.attributes or {}))
    assert reserve.name == "action reserve"
    assert reserve.attributes == {
        "flow_id": "1001",
        "flow": "demo",
        "step": "reserve",
        "kind": "action",
        "attempt": 0,
        "poll": 0,
        "generation": 0,
        "outcome": "completed",
    }
    assert [(s.name, attrs(s)["poll"], attrs(s)["outcome"]) for s in polls] == [
        ("poll await_ready", 0, "waiting"),
        ("poll await_ready", 1, "completed"),
    ]
    assert all(s.status.status_code is StatusCode.UNSET for s in [reserve, *polls])


def test_a_handler_error_marks_its_span_failed(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    h = Harness(tracer)
    h.reserve.script[:] = [RetryableError("upstream 503"), {"reservation": "r-1"}]
    h.start()
    h.deliver()
    h.deliver()
    first, second = named(exporter, "action reserve")
    assert (attrs(first)["outcome"], attrs(first)["attempt"]) == ("retry", 0)
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "upstream 503"
    assert (attrs(second)["outcome"], attrs(second)["attempt"]) == ("completed", 1)


def test_work_done_for_a_flow_outside_its_tasks_joins_its_trace(tracer: Tracer) -> None:
    h = Harness(tracer)
    h.start()
    flow_trace = h.record().trace
    h.queue.lose(h.queue.only().next.task_id)
    h.clock.advance(600)
    with telemetry.span(tracer, "sweep"):  # the sweeper's own trace
        assert h.engine.sweep(grace_s=120).rescued == 1
    rescued = h.queue.only()
    assert h.queue.headers[rescued.next.task_id] == {"traceparent": flow_trace}


# -- the task route ------------------------------------------------------------------------


def test_the_task_route_opens_a_server_span_under_the_tasks_traceparent(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    h = Harness(tracer)
    h.start()
    task = h.queue.only()
    runtime = Runtime(
        Settings(),
        load_topology(),
        h.engine,
        h.store,  # type: ignore[arg-type]
        Counters(),
        tracer,
    )
    client = task_app(runtime, route="/tasks/step", verifier=None).test_client()
    response = client.post(
        "/tasks/step",
        data=task.payload().model_dump_json(),
        headers={
            **h.queue.headers[task.next.task_id],
            "X-CloudTasks-TaskName": task.next.task_id,
            "X-CloudTasks-TaskRetryCount": "0",
        },
    )
    assert response.status_code == 200
    (server,) = named(exporter, "POST /tasks/step")
    (start,) = named(exporter, "start flow")
    assert server.kind is SpanKind.SERVER
    assert hex_ids(server)[0] == hex_ids(start)[0]
    assert parent_id(server) == hex_ids(start)[1]
    assert attrs(server)["outcome"] == "advanced"
    assert attrs(server)["cloud_tasks.task"] == task.next.task_id
    (handler,) = named(exporter, "action reserve")
    assert parent_id(handler) == hex_ids(server)[1]


# -- logs ----------------------------------------------------------------------------------


def log_line(formatter: JsonFormatter) -> dict[str, Any]:
    record = logging.LogRecord("relayflow.test", logging.INFO, __file__, 1, "hello", None, None)
    parsed: dict[str, Any] = json.loads(formatter.format(record))
    return parsed


def test_a_log_line_inside_a_span_names_its_trace_for_cloud_logging(tracer: Tracer) -> None:
    with telemetry.span(tracer, "handler") as span:
        line = log_line(JsonFormatter("relayflow-test"))
    ctx = span.get_span_context()
    assert line["logging.googleapis.com/trace"] == (
        f"projects/relayflow-test/traces/{ctx.trace_id:032x}"
    )
    assert line["logging.googleapis.com/spanId"] == f"{ctx.span_id:016x}"
    assert line["logging.googleapis.com/trace_sampled"] is True
    assert line["message"] == "hello"


def test_a_log_line_outside_any_span_or_without_a_project_has_no_trace_fields(
    tracer: Tracer,
) -> None:
    assert not any(k.startswith("logging.googleapis.com") for k in log_line(JsonFormatter("p-1")))
    with telemetry.span(tracer, "handler"):
        line = log_line(JsonFormatter())
    assert not any(k.startswith("logging.googleapis.com") for k in line)


# -- configuration -------------------------------------------------------------------------


def test_tracing_off_builds_no_tracer() -> None:
    assert telemetry.configure_tracing(Settings(trace_exporter="none"), service="test") is None


def test_the_sample_ratio_is_a_share() -> None:
    with pytest.raises(ValueError, match="trace_sample_ratio"):
        Settings(trace_sample_ratio=1.5)


def test_every_log_line_of_a_task_names_its_flow_and_tenant(caplog: Any) -> None:
    from relayflow import ActionStep, Flow
    from relayflow.core.errors import RetryableError
    from relayflow.core.tenants import Tenants
    from relayflow.testing import Harness, scripted

    lines: list[dict[str, Any]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter().format(record)))

    handler = Capture()
    logging.getLogger().addHandler(handler)
    try:
        flaky = scripted(RetryableError("busy", code="BUSY"), {"ok": True})
        h = Harness(Flow(name="job", steps=(ActionStep("go", flaky),)), tenants=Tenants())
        flow_id = h.start("job", tenant="acme")
        h.run(flow_id)
    finally:
        logging.getLogger().removeHandler(handler)
    retried = [line for line in lines if line["message"] == "retryable error"]
    assert retried and all(
        (line["flow_id"], line["tenant"]) == (flow_id, "acme") for line in retried
    )
    outside = log_line(JsonFormatter())
    assert "tenant" not in outside and "flow_id" not in outside
