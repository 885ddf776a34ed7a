"""What the engine's unit tests share: an engine over in-memory fakes (``Harness``) running
``reserve`` (action, compensated) -> ``await_ready`` (poll) -> ``finish`` (action), each handler
playing a script, on a FakeClock that moves to each task's ``run_at``; and the engine's kernel
alone over the same fakes (``kernel_over``), for the parts built on it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from relayflow.core.admission import Admission
from relayflow.core.breakers import Breakers
from relayflow.core.clock import FakeClock
from relayflow.core.engine import Ran
from relayflow.core.engine.kernel import Kernel, Limits
from relayflow.core.flows import (
    ActionStep,
    Flow,
    PollPolicy,
    PollStep,
    Registry,
    RetryPolicy,
)
from relayflow.core.metrics import Metrics
from relayflow.core.planner import QueueNames
from relayflow.core.position import TaskPayload
from relayflow.core.records import FlowRecord
from relayflow.core.tenants import Tenants

from ..fakes import FakeEvents, FakeQueue, FakeStore, ScriptedHandler, engine_over

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
INCARNATION = f"{int(NOW.timestamp() * 1000):x}"  # the flows here are created at NOW
RETRY = RetryPolicy(max_attempts=3, initial_s=1.0, multiplier=2.0, max_interval_s=10.0, jitter=0)
POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=30.0, max_polls=20)
START = {"flow": "demo", "input": {"resource": "acme-1"}}


def encode(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


class Harness:
    """An engine over fakes, with scripted handlers and helpers to deliver queued tasks."""

    def __init__(self) -> None:
        self.clock = FakeClock(NOW)
        self.store = FakeStore()
        self.queue = FakeQueue()
        self.events = FakeEvents()
        self.reserve = ScriptedHandler([{"reservation": "r-1"}])
        self.release = ScriptedHandler([{"released": True}])
        self.await_ready = ScriptedHandler([{"state": "READY"}])
        self.finish = ScriptedHandler([{"entity": "e-1"}])
        flow = Flow(
            name="demo",
            steps=(
                ActionStep("reserve", self.reserve, retry=RETRY, compensate=self.release),
                PollStep("await_ready", self.await_ready, policy=POLL),
                ActionStep("finish", self.finish, retry=RETRY),
            ),
        )
        self.engine = engine_over(
            flow, store=self.store, queue=self.queue, events=self.events, clock=self.clock
        )

    def start(self, body: Any = START, message_id: str = "1001") -> Any:
        data = body if isinstance(body, bytes) else encode(body)
        return self.engine.start(data, message_id=message_id, attributes={"origin": "test"})

    def next_payload(self, flow_id: str = "1001") -> TaskPayload:
        """Dispatch the flow's queued task, first moving the clock to when it is due."""
        task = self.queue.only(flow_id)
        if task.next.run_at > self.clock.now():
            self.clock.advance((task.next.run_at - self.clock.now()).total_seconds())
        return self.queue.take(task.next.task_id)

    def deliver(self, flow_id: str = "1001") -> Ran:
        return self.engine.run_task(self.next_payload(flow_id))

    def record(self, flow_id: str = "1001") -> FlowRecord:
        record = self.store.get(flow_id)
        assert record is not None
        return record


def kernel_over(
    *flows: Flow,
    store: FakeStore | None = None,
    queue: FakeQueue | None = None,
    events: FakeEvents | None = None,
    clock: FakeClock | None = None,
    limits: Limits | None = None,
    breakers: Breakers | None = None,
    metrics: Metrics | None = None,
) -> Kernel:
    """The engine's kernel for ``flows`` over the in-memory ports (fresh ones unless given),
    at NOW, with queues named q-steps and q-polls."""
    store = store or FakeStore()
    return Kernel(
        registry=Registry(flows),
        store=store,
        queue=queue or FakeQueue(),
        events=events or FakeEvents(),
        clock=clock or FakeClock(NOW),
        queues=QueueNames(steps="q-steps", polls="q-polls"),
        limits=limits or Limits(),
        admission=Admission(store, Tenants()),
        breakers=breakers,
        tracer=None,
        metrics=metrics or Metrics(),
    )
