"""Cloud Tasks: enqueue a flow's next task under its deterministic name.

``ALREADY_EXISTS`` means somebody (a duplicate handler, an earlier try) enqueued it already, and
is success (DESIGN invariant 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc
from google.api_core.exceptions import AlreadyExists, FailedPrecondition, NotFound
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

from relayflow.core.bulk import BulkTask
from relayflow.core.ports import Enqueued
from relayflow.core.position import PollNote, TaskPayload
from relayflow.core.records import NextTask
from relayflow.settings import Settings
from relayflow.telemetry import Counters, trace_headers

_Task = tasks_v2.Task.pb()
_CreateTaskRequest = tasks_v2.CreateTaskRequest.pb()


def build_client(settings: Settings) -> tasks_v2.CloudTasksClient:
    """A Cloud Tasks client; over an insecure channel when CLOUD_TASKS_EMULATOR_HOST is set.

    The library has no emulator variable of its own.
    """
    host = settings.cloud_tasks_emulator_host
    if host is None:
        return tasks_v2.CloudTasksClient()
    transport = CloudTasksGrpcTransport(channel=grpc.insecure_channel(host))
    return tasks_v2.CloudTasksClient(transport=transport)


@dataclass(frozen=True)
class Target:
    """Where a queue's tasks go and how long the target may take."""

    url: str
    audience: str
    dispatch_deadline_s: int


@dataclass(frozen=True)
class BulkTarget:
    """Where bulk actions' batch tasks go: a queue of the topology's (the steps queue's
    first shard: a few tasks a minute beside its 500 a second) and the worker's batch route."""

    queue: str
    target: Target


class TaskQueue:
    """Creates and inspects relayflow tasks in their queues."""

    def __init__(
        self,
        client: tasks_v2.CloudTasksClient,
        *,
        project: str,
        location: str,
        targets: dict[str, Target],
        service_account: str,
        counters: Counters | None = None,
        bulk: BulkTarget | None = None,
    ) -> None:
        self._client = client
        self._project = project
        self._location = location
        self._targets = targets
        self._bulk = bulk
        self._service_account = service_account
        self._counters = counters or Counters()

    def queue_path(self, queue: str) -> str:
        return self._client.queue_path(self._project, self._location, queue)

    def ensure(self, flow_id: str, nxt: NextTask, chain: Sequence[PollNote] = ()) -> Enqueued:
        """Create the task for ``nxt`` unless it exists (or existed) under its name; a poll
        chain's next task carries ``chain`` in its body."""
        request = _CreateTaskRequest(parent=self.queue_path(nxt.queue))
        payload = TaskPayload(flow_id=flow_id, position=nxt.position, chain=tuple(chain))
        self._fill(
            request.task,
            (nxt.queue, nxt.task_id, nxt.run_at),
            self._targets[nxt.queue],
            payload.model_dump_json(),
        )
        return self._create(request)

    def ensure_batch(self, task: BulkTask, run_at: datetime) -> Enqueued:
        """Create a bulk action's batch task unless one of its name exists (or existed)."""
        if self._bulk is None:
            raise RuntimeError("this queue was built without a target for bulk actions")
        request = _CreateTaskRequest(parent=self.queue_path(self._bulk.queue))
        where = (self._bulk.queue, task.task_id(), run_at)
        self._fill(request.task, where, self._bulk.target, task.model_dump_json())
        return self._create(request)

    def _create(self, request: Any) -> Enqueued:
        try:
            # A plain protobuf request, wrapped without a copy: the client would otherwise
            # rebuild the task through proto-plus on every call (a tenth of a poll's CPU).
            self._client.create_task(request=tasks_v2.CreateTaskRequest.wrap(request), timeout=10.0)
        except AlreadyExists:
            self._counters.add("tasks_deduplicated")
            return Enqueued.ALREADY_ENQUEUED
        self._counters.add("tasks_created")
        return Enqueued.CREATED

    def run_now(self, nxt: NextTask) -> bool:
        name = self._client.task_path(self._project, self._location, nxt.queue, nxt.task_id)
        try:
            self._client.run_task(name=name, timeout=10.0)
        except (NotFound, FailedPrecondition):  # dispatched meanwhile, or gone
            return False
        return True

    def exists(self, nxt: NextTask) -> bool:
        """Whether the task is still in its queue (waiting or being retried)."""
        name = self._client.task_path(self._project, self._location, nxt.queue, nxt.task_id)
        try:
            self._client.get_task(name=name, timeout=10.0)
        except NotFound:
            return False
        return True

    def pending(self, flow_id: str, tasks: Sequence[NextTask]) -> TaskPayload | None:
        """The body of the last of ``tasks`` still in its queue (GetTask, FULL view: the
        body is left out of the default one), newest first; None if none is."""
        for nxt in reversed(tasks):
            name = self._client.task_path(self._project, self._location, nxt.queue, nxt.task_id)
            try:
                task = self._client.get_task(
                    request={"name": name, "response_view": tasks_v2.Task.View.FULL},
                    timeout=10.0,
                )
            except NotFound:
                continue
            self._counters.add("tasks_read")
            return TaskPayload.model_validate_json(task.http_request.body)
        return None

    def _fill(self, task: Any, where: tuple[str, str, datetime], target: Target, body: str) -> None:
        queue, task_id, run_at = where
        task.name = self._client.task_path(self._project, self._location, queue, task_id)
        task.schedule_time.FromDatetime(run_at)
        task.dispatch_deadline.seconds = int(target.dispatch_deadline_s)
        http = task.http_request
        http.url = target.url
        http.http_method = tasks_v2.HttpMethod.POST
        # traceparent (when a trace is current) makes the task's span its child.
        http.headers.update({"Content-Type": "application/json", **trace_headers()})
        http.body = body.encode("utf-8")
        http.oidc_token.service_account_email = self._service_account
        http.oidc_token.audience = target.audience
