"""TaskQueue against the Cloud Tasks emulator, through the official client over gRPC."""

from __future__ import annotations

import json
from collections.abc import Callable

from google.cloud import tasks_v2

from relayflow.core.ports import Enqueued
from relayflow.core.position import TaskPayload
from relayflow.gcp.queue import TaskQueue
from relayflow.settings import Settings
from relayflow.topology import Topology

from .support import full_task, next_task, queued_tasks


def test_ensure_creates_the_task_as_relayflow_describes_it(
    task_queue: TaskQueue,
    tasks_client: tasks_v2.CloudTasksClient,
    settings: Settings,
    topology: Topology,
    new_flow_id: Callable[[], str],
) -> None:
    flow_id = new_flow_id()
    steps = topology.queues.steps
    nxt = next_task(flow_id, steps.name)

    assert task_queue.ensure(flow_id, nxt) is Enqueued.CREATED

    name = tasks_client.task_path(settings.project_id, settings.location, steps.name, nxt.task_id)
    task = full_task(tasks_client, name)
    worker = str(settings.worker_url).rstrip("/")
    request = task.http_request
    assert task.name == name
    assert task.schedule_time == nxt.run_at
    assert task.dispatch_deadline.total_seconds() == steps.dispatch_deadline_s
    assert task.dispatch_count == 0
    assert request.url == f"{worker}/tasks/step"
    assert request.http_method == tasks_v2.HttpMethod.POST
    assert request.headers["Content-Type"] == "application/json"
    assert request.oidc_token.service_account_email == settings.tasks_service_account
    assert request.oidc_token.audience == worker
    assert TaskPayload.model_validate_json(request.body) == TaskPayload(
        flow_id=flow_id, position=nxt.position
    )
    assert set(json.loads(request.body)) == {"flow_id", "position"}


def test_poll_tasks_go_to_the_poller(
    task_queue: TaskQueue,
    tasks_client: tasks_v2.CloudTasksClient,
    settings: Settings,
    topology: Topology,
    new_flow_id: Callable[[], str],
) -> None:
    flow_id = new_flow_id()
    polls = topology.queues.polls
    nxt = next_task(flow_id, polls.name)

    assert task_queue.ensure(flow_id, nxt) is Enqueued.CREATED

    [task] = queued_tasks(tasks_client, task_queue, polls.name, flow_id)
    poller = str(settings.poller_url).rstrip("/")
    assert task.name.endswith(f"/queues/{polls.name}/tasks/{nxt.task_id}")
    full = full_task(tasks_client, task.name)
    assert full.http_request.url == f"{poller}/tasks/poll"
    assert full.http_request.oidc_token.audience == poller
    assert full.dispatch_deadline.total_seconds() == polls.dispatch_deadline_s


def test_a_second_ensure_is_already_enqueued_and_adds_nothing(
    task_queue: TaskQueue,
    tasks_client: tasks_v2.CloudTasksClient,
    topology: Topology,
    new_flow_id: Callable[[], str],
) -> None:
    flow_id = new_flow_id()
    nxt = next_task(flow_id, topology.queues.steps.name)
    task_queue.ensure(flow_id, nxt)

    again = task_queue.ensure(flow_id, nxt)

    assert again is Enqueued.ALREADY_ENQUEUED
    assert len(queued_tasks(tasks_client, task_queue, nxt.queue, flow_id)) == 1


def test_a_deleted_task_name_is_never_reused(
    task_queue: TaskQueue,
    tasks_client: tasks_v2.CloudTasksClient,
    topology: Topology,
    new_flow_id: Callable[[], str],
) -> None:
    flow_id = new_flow_id()
    nxt = next_task(flow_id, topology.queues.steps.name)
    task_queue.ensure(flow_id, nxt)
    [task] = queued_tasks(tasks_client, task_queue, nxt.queue, flow_id)
    assert task_queue.exists(nxt)

    tasks_client.delete_task(name=task.name)

    assert not task_queue.exists(nxt)
    assert task_queue.ensure(flow_id, nxt) is Enqueued.ALREADY_ENQUEUED  # the tombstone
    assert not task_queue.exists(nxt)  # and nothing was created under the old name


def test_exists_is_false_for_a_task_never_created(
    task_queue: TaskQueue, topology: Topology, new_flow_id: Callable[[], str]
) -> None:
    assert not task_queue.exists(next_task(new_flow_id(), topology.queues.steps.name))


def test_run_now_dispatches_a_task_scheduled_later(
    task_queue: TaskQueue,
    tasks_client: tasks_v2.CloudTasksClient,
    settings: Settings,
    topology: Topology,
    new_flow_id: Callable[[], str],
) -> None:
    from google.api_core.exceptions import NotFound

    from relayflow.local.polling import poll_until

    flow_id = new_flow_id()
    nxt = next_task(flow_id, topology.queues.polls.name)  # an hour ahead
    task_queue.ensure(flow_id, nxt)
    assert task_queue.run_now(nxt)
    name = tasks_client.task_path(settings.project_id, settings.location, nxt.queue, nxt.task_id)

    def dispatched() -> bool:  # no worker listens here: the attempt fails and is counted
        try:
            return tasks_client.get_task(name=name).dispatch_count >= 1
        except NotFound:
            return True

    assert poll_until(dispatched, timeout_s=10)
    gone = next_task(new_flow_id(), topology.queues.polls.name)
    assert not task_queue.run_now(gone)
