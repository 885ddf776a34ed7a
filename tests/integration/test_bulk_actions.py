"""Bulk actions' documents against the Firestore emulator (compare-and-set writes, chunks of
rows, the list and the sweeper's query) and their batch tasks against the Cloud Tasks emulator
(named, deduplicated, aimed at the worker's batch route)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

from google.cloud import firestore, tasks_v2

from relayflow.core.bulk import BulkKind, BulkTask
from relayflow.core.bulk_state import BulkAction, BulkRow, BulkState, Outcome
from relayflow.core.planner import Preview
from relayflow.core.ports import Enqueued
from relayflow.core.state import Status
from relayflow.gcp.bulk_actions import FirestoreBulkActions
from relayflow.gcp.queue import TaskQueue
from relayflow.settings import Settings
from relayflow.topology import Topology

from .support import AHEAD, full_task, make_record

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def action(bulk_id: str, *, at: datetime = AT) -> BulkAction:
    return BulkAction(
        id=bulk_id,
        action=BulkKind.RETRY,
        filter={"status": "FAILED", "updated_from": AT - timedelta(hours=1)},
        reason="client API back",
        by="ana@example.com",
        rate_per_s=5.0,
        batch_size=10,
        created_at=at,
        updated_at=at,
        matched=2,
        allowed=2,
        chunks=1,
    )


def test_a_bulk_action_is_stored_with_its_rows_and_written_by_compare_and_set(
    firestore_client: firestore.Client,
) -> None:
    store = FirestoreBulkActions(firestore_client)
    flows = [make_record(f"f-{i}", status=Status.FAILED) for i in range(2)]
    preview = Preview("f-0", "retry", allowed=True, rerun=("first",), detail={"generation": 1})
    rows = [BulkRow.of(record, preview) for record in flows]
    store.create(action("bulk-0123456789ab"), [rows], rows_expire_at=AT + timedelta(days=60))

    read = store.read("bulk-0123456789ab")
    assert read is not None and read.version is not None
    assert read.filter["updated_from"] == AT - timedelta(hours=1)  # a time stays a time
    running = read.model_copy(update={"state": BulkState.RUNNING})
    assert store.write(running)
    assert not store.write(running)  # its version is stale now: refused
    assert store.read("bulk-0123456789ab").state is BulkState.RUNNING  # type: ignore[union-attr]
    assert [a.id for a in store.running()] == ["bulk-0123456789ab"]

    found, version = store.rows("bulk-0123456789ab", 0)
    assert [r.flow_id for r in found] == ["f-0", "f-1"] and found[0].rerun == ["first"]
    done = [found[0].ended(Outcome.DONE, "", AT), found[1]]
    assert store.write_rows("bulk-0123456789ab", 0, done, version)
    assert not store.write_rows("bulk-0123456789ab", 0, found, version)  # stale: refused
    assert store.rows("bulk-0123456789ab", 0)[0][0].outcome is Outcome.DONE
    assert store.rows("bulk-0123456789ab", 7) == ([], None)
    assert store.read("bulk-ffffffffffff") is None


def test_bulk_actions_are_listed_newest_first(firestore_client: firestore.Client) -> None:
    store = FirestoreBulkActions(firestore_client)
    for n, bulk_id in enumerate(("bulk-00000000000a", "bulk-00000000000b")):
        store.create(action(bulk_id, at=AT + timedelta(minutes=n)), [], rows_expire_at=AT)
    assert [a.id for a in store.recent(limit=5)] == ["bulk-00000000000b", "bulk-00000000000a"]


def test_a_batch_task_is_named_deduplicated_and_aimed_at_the_worker(
    task_queue: TaskQueue,
    tasks_client: tasks_v2.CloudTasksClient,
    settings: Settings,
    topology: Topology,
) -> None:
    bulk_id = f"bulk-{secrets.token_hex(6)}"  # the emulator keeps earlier runs' task names
    task = BulkTask(bulk_id=bulk_id, batch=3, round=1, deferral=2)
    run_at = datetime.now(UTC) + AHEAD

    assert task_queue.ensure_batch(task, run_at) is Enqueued.CREATED
    assert task_queue.ensure_batch(task, run_at) is Enqueued.ALREADY_ENQUEUED

    steps = topology.queues.steps.name
    name = tasks_client.task_path(settings.project_id, settings.location, steps, task.task_id())
    created = full_task(tasks_client, name)
    assert created.http_request.url == f"{str(settings.worker_url).rstrip('/')}/tasks/bulk"
    assert BulkTask.model_validate_json(created.http_request.body) == task
    assert task.task_id().endswith(f"-{bulk_id}-r1-b3-d2")
