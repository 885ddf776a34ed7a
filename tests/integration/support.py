"""Plain helpers shared by the integration tests (fixtures live in conftest.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core.exceptions import DeadlineExceeded
from google.cloud import tasks_v2
from google.pubsub_v1 import ReceivedMessage, SubscriberClient

from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.records import FlowRecord, NextTask, Track
from relayflow.core.state import ACTIVE, Status
from relayflow.gcp import queue
from relayflow.local.polling import poll_until

# Far enough ahead that the emulator never dispatches a test's task while the test runs.
AHEAD = timedelta(hours=1)


def queued_tasks(
    client: tasks_v2.CloudTasksClient, task_queue: queue.TaskQueue, queue_name: str, *flow_ids: str
) -> list[tasks_v2.Task]:
    """The tasks in ``queue_name`` that belong to any of ``flow_ids`` (by their names)."""
    markers = tuple(f"-{flow_id}-" for flow_id in flow_ids)
    tasks = client.list_tasks(parent=task_queue.queue_path(queue_name))
    return [task for task in tasks if any(marker in task.name for marker in markers)]


def full_task(client: tasks_v2.CloudTasksClient, name: str) -> tasks_v2.Task:
    """GetTask with the FULL view, which includes the HTTP body."""
    return client.get_task(request={"name": name, "response_view": tasks_v2.Task.View.FULL})


def make_record(
    flow_id: str,
    *,
    status: Status = Status.PENDING,
    updated_at: datetime | None = None,
    next_run_at: datetime | None = None,
    **fields: Any,
) -> FlowRecord:
    """A valid flow document at the first step of a one-step flow; an active one has a track
    (its task due at ``next_run_at``, or an hour ahead)."""
    at = updated_at or datetime.now(UTC)
    position = Position(step_index=0, step="first", kind=TaskKind.ACTION)
    tracks: dict[str, Track] = {}
    if status in ACTIVE:
        nxt = next_task(flow_id, "flow-steps", run_at=next_run_at)
        tracks["first"] = Track(position=position, next=nxt, started_at=at)
    values: dict[str, Any] = {
        "flow_id": flow_id,
        "flow": "it-flow",
        "input": {"n": 1},
        "status": status,
        "position": position,
        "tracks": tracks,
        "created_at": at,
        "updated_at": at,
    }
    return FlowRecord.model_validate({**values, **fields}).stored()


def next_task(flow_id: str, queue_name: str, *, run_at: datetime | None = None) -> NextTask:
    """The first action task of a flow, due ``AHEAD`` from now unless told otherwise."""
    position = Position(step_index=0, step="first", kind=TaskKind.ACTION)
    return NextTask(
        queue=queue_name,
        task_id=task_id(flow_id, position),
        run_at=run_at or datetime.now(UTC) + AHEAD,
        position=position,
    )


def pull(
    subscriber: SubscriberClient, subscription: str, *, count: int, timeout_s: float = 10.0
) -> list[ReceivedMessage]:
    """Pull and ack until ``count`` messages arrived (or the deadline passed); what arrived."""
    received: list[ReceivedMessage] = []

    def enough() -> bool:
        try:
            # The emulator holds an empty pull open for seconds: keep each one short.
            response = subscriber.pull(subscription=subscription, max_messages=count, timeout=0.5)
        except DeadlineExceeded:
            return False
        if response.received_messages:
            received.extend(response.received_messages)
            ack_ids = [m.ack_id for m in response.received_messages]
            subscriber.acknowledge(subscription=subscription, ack_ids=ack_ids)
        return len(received) >= count

    poll_until(enough, timeout_s=timeout_s, interval_s=0.05)
    return received
