"""The engine on the real store, queue and events, with a small flow of plain-Python handlers.

The clock is fake and two hours ahead, so every task the engine schedules waits in the Cloud
Tasks emulator (aimed at ports where nothing listens) while the test drives the flow itself.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import tasks_v2
from google.pubsub_v1 import SubscriberClient

from relayflow.core.clock import FakeClock
from relayflow.core.engine import Engine, Limits, Ran, Started, idempotency_key, safe_id
from relayflow.core.flows import ActionStep, Flow, Registry, StepContext
from relayflow.core.planner import QueueNames
from relayflow.core.position import TaskPayload
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.gcp.events import Events
from relayflow.gcp.queue import TaskQueue
from relayflow.gcp.store import FlowStore
from relayflow.settings import Settings

from .support import pull, queued_tasks

FLOW = "it-two-steps"


@dataclass
class ClientApi:
    """Stands in for the external API the steps call: it records each call it receives."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    # Set to hold the first step's handler: it signals the first event, then waits for the
    # second (a delivery caught in the middle of its side effect).
    hold: tuple[threading.Event, threading.Event] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, context: StepContext) -> dict[str, Any]:
        if self.hold is not None:
            entered, release = self.hold
            entered.set()
            release.wait(timeout=30)
        self._record("register", context)
        return {"registration": f"reg-{context.input['name']}"}

    def activate(self, context: StepContext) -> dict[str, Any]:
        self._record("activate", context)
        return {"active": True, "registration": context.outputs["register"]["registration"]}

    def _record(self, call: str, context: StepContext) -> None:
        with self._lock:
            self.calls.append((call, context.idempotency_key))


@dataclass(frozen=True)
class Harness:
    engine: Engine
    client: ClientApi
    clock: FakeClock
    store: FlowStore
    queue: TaskQueue
    tasks: tasks_v2.CloudTasksClient
    steps_queue: str

    def tasks_of(self, flow_id: str) -> list[str]:
        """Names of the flow's tasks waiting in the steps queue, sorted."""
        tasks = queued_tasks(self.tasks, self.queue, self.steps_queue, flow_id)
        return sorted(task.name for task in tasks)

    def flow(self, flow_id: str) -> FlowRecord:
        record = self.store.get(flow_id)
        assert record is not None, f"no flow {flow_id}"
        return record


@pytest.fixture
def harness(
    flow_store: FlowStore,
    task_queue: TaskQueue,
    publisher: Events,
    queue_names: QueueNames,
    tasks_client: tasks_v2.CloudTasksClient,
    settings: Settings,
) -> Harness:
    client = ClientApi()
    flow = Flow(
        name=FLOW,
        steps=(ActionStep("register", client.register), ActionStep("activate", client.activate)),
    )
    clock = FakeClock(datetime.now(UTC) + timedelta(hours=2))
    engine = Engine(
        registry=Registry((flow,)),
        store=flow_store,
        queue=task_queue,
        events=publisher,
        clock=clock,
        queues=queue_names,
        limits=Limits(history_limit=settings.history_limit),
    )
    return Harness(engine, client, clock, flow_store, task_queue, tasks_client, queue_names.steps)


def start_message(flow_id: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"flow": FLOW, "input": {"name": "acme"}, **extra}
    if flow_id is not None:
        body["flow_id"] = flow_id
    return json.dumps(body).encode()


def started(harness: Harness, flow_id: str) -> FlowRecord:
    """A flow started through the engine, at its first step."""
    result = harness.engine.start(start_message(flow_id), message_id=f"m-{flow_id}", attributes={})
    assert result.outcome is Started.STARTED
    return harness.flow(flow_id)


def test_start_creates_the_flow_and_enqueues_its_first_task(
    harness: Harness, new_flow_id: Callable[[], str]
) -> None:
    flow_id = new_flow_id()

    result = harness.engine.start(
        start_message(flow_id), message_id="m-1", attributes={"origin": "test"}
    )

    assert (result.outcome, result.flow_id) == (Started.STARTED, flow_id)
    record = harness.flow(flow_id)
    assert record.status is Status.PENDING
    assert record.input == {"name": "acme"}
    assert record.message_id == "m-1"
    assert record.next is not None
    assert record.next.position == record.position
    assert record.next.run_at == record.next_run_at == harness.clock.now()
    assert harness.queue.exists(record.next)
    [name] = harness.tasks_of(flow_id)
    assert name.endswith(f"/tasks/{record.next.task_id}")
    assert harness.client.calls == []  # starting runs no step


def test_the_same_message_twice_starts_one_flow(
    harness: Harness, new_flow_id: Callable[[], str]
) -> None:
    message_id = new_flow_id()  # no flow_id in the message: the flow id comes from this
    first = harness.engine.start(start_message(), message_id=message_id, attributes={})
    record = harness.flow(message_id)

    again = harness.engine.start(start_message(), message_id=message_id, attributes={})

    assert (first.outcome, first.flow_id) == (Started.STARTED, message_id)
    assert (again.outcome, again.flow_id) == (Started.DUPLICATE, message_id)
    assert harness.flow(message_id) == record
    assert len(harness.tasks_of(message_id)) == 1
    assert harness.store.recent() == [record]


def test_a_second_message_for_a_running_flow_id_changes_nothing(
    harness: Harness, new_flow_id: Callable[[], str]
) -> None:
    flow_id = new_flow_id()
    record = started(harness, flow_id)

    again = harness.engine.start(
        start_message(flow_id, deadline_s=60), message_id="another-message", attributes={}
    )

    assert (again.outcome, again.flow_id) == (Started.DUPLICATE, flow_id)
    assert harness.flow(flow_id) == record
    assert len(harness.tasks_of(flow_id)) == 1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json", "message data is not JSON"),
        (b'{"flow": "it-two-steps"}', "input: Field required"),
        (b'{"flow": "nope", "input": {}}', "unknown flow 'nope'"),
        (b'{"flow": "it-two-steps", "input": {}, "flow_id": "a/b"}', "flow_id: String should"),
    ],
)
def test_a_malformed_message_is_recorded_with_its_reason(
    harness: Harness, data: bytes, reason: str
) -> None:
    message_id = "projects/p/messages/17"  # not a legal document id: stored under a safe one

    result = harness.engine.start(data, message_id=message_id, attributes={"origin": "test"})

    assert result.outcome is Started.REJECTED
    assert result.flow_id is None
    assert result.reason is not None
    assert reason in result.reason
    rejected = harness.store.rejected(safe_id(message_id))
    assert rejected == {
        "message_id": message_id,
        "reason": result.reason,
        "data_base64": base64.b64encode(data).decode("ascii"),
        "data_truncated": False,
        "attributes": [{"key": "origin", "value": "test"}],
        "rejected_at": harness.clock.now(),
        "expire_at": harness.clock.now() + timedelta(days=30),  # the default retention
    }
    assert harness.store.recent() == []


@pytest.mark.parametrize(
    ("data", "attributes", "reason"),
    [
        # An attribute key Firestore refuses as a field name: the record used to fail to write,
        # so the message was redelivered until it was dead-lettered.
        (b"not json", {"__origin__": "x", "ok": "y"}, "message data is not JSON"),
        # An input key over Firestore's 1,500-byte field-name limit: the flow's create failed.
        (
            json.dumps({"flow": FLOW, "input": {"k" * 1600: 1}}).encode(),
            {},
            "Firestore stores a field path of at most 1,500 bytes",
        ),
    ],
)
def test_a_message_firestore_could_not_store_is_recorded_not_raised(
    harness: Harness, data: bytes, attributes: dict[str, str], reason: str
) -> None:
    result = harness.engine.start(data, message_id="odd-1", attributes=attributes)

    assert result.outcome is Started.REJECTED
    assert result.reason is not None and reason in result.reason
    rejected = harness.store.rejected("odd-1")
    assert rejected is not None
    assert rejected["attributes"] == [{"key": k, "value": v} for k, v in sorted(attributes.items())]
    (listed,) = [m for m in harness.store.rejected_messages().items if m.id == "odd-1"]
    assert listed.attributes == attributes


def test_the_current_task_advances_the_flow_and_enqueues_the_next(
    harness: Harness, new_flow_id: Callable[[], str]
) -> None:
    flow_id = new_flow_id()
    record = started(harness, flow_id)
    harness.clock.advance(5)

    ran = harness.engine.run_task(TaskPayload(flow_id=flow_id, position=record.position))

    assert ran is Ran.ADVANCED
    after = harness.flow(flow_id)
    assert after.status is Status.RUNNING
    assert after.position.step == "activate"
    assert after.outputs == {"register": {"registration": "reg-acme"}}
    assert [(h.step, h.outcome) for h in after.history] == [("register", "succeeded")]
    assert after.updated_at == harness.clock.now()
    assert after.next is not None
    assert after.next.position == after.position
    assert harness.queue.exists(after.next)
    assert len(harness.tasks_of(flow_id)) == 2  # the first task was never dispatched
    key = idempotency_key(after, after.position.model_copy(update={"step": "register"}))
    assert harness.client.calls == [("register", key)]


def test_a_stale_task_is_a_no_op(harness: Harness, new_flow_id: Callable[[], str]) -> None:
    flow_id = new_flow_id()
    first = started(harness, flow_id).position
    harness.engine.run_task(TaskPayload(flow_id=flow_id, position=first))
    before, tasks_before, calls_before = (
        harness.flow(flow_id),
        harness.tasks_of(flow_id),
        list(harness.client.calls),
    )
    harness.clock.advance(5)

    ran = harness.engine.run_task(TaskPayload(flow_id=flow_id, position=first))

    assert ran is Ran.STALE
    assert harness.flow(flow_id) == before
    assert harness.tasks_of(flow_id) == tasks_before
    assert harness.client.calls == calls_before


def test_a_task_for_an_unknown_flow_is_dropped(
    harness: Harness, new_flow_id: Callable[[], str]
) -> None:
    flow_id = new_flow_id()
    position = started(harness, flow_id).position

    ran = harness.engine.run_task(TaskPayload(flow_id=new_flow_id(), position=position))

    assert ran is Ran.NO_FLOW
    assert harness.client.calls == []


def test_two_deliveries_of_one_task_at_once_run_the_side_effect_once(
    harness: Harness, new_flow_id: Callable[[], str]
) -> None:
    # given the first delivery of ``register`` is inside its handler, holding the claim
    flow_id = new_flow_id()
    payload = TaskPayload(flow_id=flow_id, position=started(harness, flow_id).position)
    # (later than the create's claim for its first dispatch covers: it claims for itself)
    harness.clock.advance(Limits().first_delivery_within_s + 1)
    entered, release = threading.Event(), threading.Event()
    harness.client.hold = (entered, release)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(harness.engine.run_task, payload)
        assert entered.wait(timeout=30)

        # when the duplicate is delivered meanwhile
        second = harness.engine.run_task(payload)
        release.set()

        # then the duplicate is sent away busy, and only the first calls the API and commits
        assert (first.result(timeout=30), second) == (Ran.ADVANCED, Ran.BUSY)
    after = harness.flow(flow_id)
    assert [(h.step, h.outcome) for h in after.history] == [("register", "succeeded")]
    assert after.claim is None
    assert after.position.step == "activate"
    key = idempotency_key(after, after.position.model_copy(update={"step": "register"}))
    assert harness.client.calls == [("register", key)]
    # and once the first has committed, the duplicate's retry is a stale no-op
    assert harness.engine.run_task(payload) is Ran.STALE


def test_a_duplicate_of_the_first_dispatch_at_once_calls_with_the_same_key_and_one_commits(
    harness: Harness, new_flow_id: Callable[[], str]
) -> None:
    # given the first dispatch of ``register`` is inside its handler under the create's claim
    flow_id = new_flow_id()
    payload = TaskPayload(flow_id=flow_id, position=started(harness, flow_id).position)
    entered, release = threading.Event(), threading.Event()
    harness.client.hold = (entered, release)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(harness.engine.run_task, payload)
        assert entered.wait(timeout=30)

        # when its duplicate (retry count 0 too) is delivered meanwhile, and finishes first
        harness.client.hold = None
        second = harness.engine.run_task(payload)
        release.set()

        # then both called the API, under one idempotency key, and only one commit landed:
        # the other's conditional write found the document changed and the position moved on
        assert (first.result(timeout=30), second) == (Ran.STALE, Ran.ADVANCED)
    after = harness.flow(flow_id)
    assert [(h.step, h.outcome) for h in after.history] == [("register", "succeeded")]
    assert after.position.step == "activate"
    key = idempotency_key(after, after.position.model_copy(update={"step": "register"}))
    assert harness.client.calls == [("register", key), ("register", key)]


def test_the_last_step_ends_the_flow_and_publishes_the_result_once(
    harness: Harness,
    new_flow_id: Callable[[], str],
    subscriber: SubscriberClient,
    results_subscription: str,
) -> None:
    flow_id = new_flow_id()
    harness.engine.run_task(
        TaskPayload(flow_id=flow_id, position=started(harness, flow_id).position)
    )
    last = harness.flow(flow_id).position

    ran = harness.engine.run_task(TaskPayload(flow_id=flow_id, position=last))
    redelivered = harness.engine.run_task(TaskPayload(flow_id=flow_id, position=last))

    assert (ran, redelivered) == (Ran.ADVANCED, Ran.STALE)
    done = harness.flow(flow_id)
    assert done.status is Status.SUCCEEDED
    assert done.next is None
    assert done.result_published
    assert done.result is not None
    assert done.result.data == {"active": True, "registration": "reg-acme"}  # the last output
    assert done.outputs == {
        "register": {"registration": "reg-acme"},
        "activate": {"active": True, "registration": "reg-acme"},
    }
    [event] = pull(subscriber, results_subscription, count=1)
    assert dict(event.message.attributes) == {
        "flow_id": flow_id,
        "flow": "it-two-steps",
        "tenant": "default",
        "status": "SUCCEEDED",
        "generation": "0",
        "event": "result",
    }
    assert json.loads(event.message.data)["data"] == done.result.data
    assert pull(subscriber, results_subscription, count=1, timeout_s=1.0) == []
