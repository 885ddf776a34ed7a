"""relayflow.gcp.recording against the emulators: every Firestore write and read (through
relayflow's own Documents and through the high-level client's queries, counts and batches),
every task created and every message published lands in the log, one JSON line each."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.api_core.exceptions import AlreadyExists
from google.cloud import firestore, tasks_v2

from relayflow.capacity import oplog
from relayflow.core.listing import FlowFilter
from relayflow.core.state import Status
from relayflow.gcp import events, queue, recording, store
from relayflow.gcp.store import keys
from relayflow.runtime import task_targets
from relayflow.settings import Settings
from relayflow.topology import Topology

from .support import make_record, next_task


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "ops.jsonl"


@pytest.fixture
def recorded_store(
    firestore_client: firestore.Client, topology: Topology, log: Path
) -> store.FlowStore:
    recorder = recording.Recorder(str(log), "test")
    return store.FlowStore(
        recording.firestore(firestore_client, recorder),
        flows=topology.firestore.flows_collection,
    )


def test_without_the_variable_nothing_is_wrapped(firestore_client: firestore.Client) -> None:
    recorder = recording.from_env("test", environ={})
    api = firestore_client._firestore_api

    assert recorder is None
    assert recording.firestore(firestore_client, recorder)._firestore_api is api
    assert recording.tasks(api, recorder) is api
    assert recording.publisher(api, recorder) is api


def test_a_create_an_update_and_a_read_are_recorded(
    recorded_store: store.FlowStore, log: Path, topology: Topology
) -> None:
    record = make_record("rec-1", status=Status.PENDING)
    recorded_store.create(record)
    recorded_store.change("rec-1", lambda r: r.model_copy(update={"status": Status.RUNNING}))

    ops = oplog.read(log)

    writes = list(oplog.of_kind(ops, oplog.FS_WRITE))
    assert [w.get("kind") for w in writes] == ["create", "update"]
    assert {w.get("coll") for w in writes} == {topology.firestore.flows_collection}
    assert {keys.key_of(w.get("id")) for w in writes} == {"rec-1"}
    assert "created_at" in writes[0].get("ts") and "updated_at" in writes[0].get("ts")
    assert "status" in writes[1].get("fields") and "flow_id" not in writes[1].get("fields")
    reads = list(oplog.of_kind(ops, oplog.FS_READ))
    # the create's look at the legacy id (a start redelivered across the upgrade), the change's read
    assert [(r.get("rpc"), r.get("n")) for r in reads] == [("get", 1), ("get", 1)]
    assert all(op.component == "test" for op in ops)


def test_queries_counts_and_batches_are_recorded(
    recorded_store: store.FlowStore, log: Path, topology: Topology
) -> None:
    flows = topology.firestore.flows_collection
    for i in range(3):
        recorded_store.create(make_record(f"rec-q{i}", status=Status.RUNNING))
    seen = len(oplog.read(log))

    recorded_store.recent(status=Status.RUNNING, limit=2)
    recorded_store.count_by_status(FlowFilter())

    ops = oplog.read(log)[seen:]
    queries = [op for op in ops if op.get("rpc") == "query"]
    # one query per index shard (the store merges them): each of the three flows read once
    assert {q.get("coll") for q in queries} == {flows}
    assert sum(int(q.get("n") or 0) for q in queries) == 3
    assert {op.get("rpc") for op in ops} == {"query", "aggregation"}


def test_a_batch_write_of_the_high_level_client_is_recorded(
    recorded_store: store.FlowStore, log: Path
) -> None:
    batch = recorded_store.client.batch()
    batch.set(recorded_store.client.collection("tenants").document("acme"), {"paused": True})
    batch.commit()

    [write] = oplog.of_kind(oplog.read(log), oplog.FS_WRITE)
    assert (write.get("coll"), write.get("id"), write.get("kind")) == ("tenants", "acme", "set")
    assert write.get("fields") == ["paused"]


def test_tasks_created_and_found_again_are_recorded(
    tasks_client: tasks_v2.CloudTasksClient,
    settings: Settings,
    topology: Topology,
    new_flow_id: Callable[[], str],
    log: Path,
) -> None:
    task_queue = queue.TaskQueue(
        recording.tasks(tasks_client, recording.Recorder(str(log), "test")),
        project=settings.project_id,
        location=settings.location,
        targets=task_targets(settings, topology),
        service_account=settings.tasks_service_account,
    )
    flow_id = new_flow_id()
    nxt = next_task(flow_id, topology.queues.steps.name)

    task_queue.ensure(flow_id, nxt)
    task_queue.ensure(flow_id, nxt)  # ALREADY_EXISTS: success, recorded as such

    creates = list(oplog.of_kind(oplog.read(log), oplog.TASK_CREATE))
    assert [(c.get("queue"), c.get("task"), c.get("outcome")) for c in creates] == [
        (topology.queues.steps.name, nxt.task_id, "created"),
        (topology.queues.steps.name, nxt.task_id, "exists"),
    ]


def test_an_already_existing_task_still_raises(
    tasks_client: tasks_v2.CloudTasksClient, log: Path
) -> None:
    class Exists:
        def create_task(self, **_: object) -> None:
            raise AlreadyExists("there")  # type: ignore[no-untyped-call]

    client = recording.tasks(Exists(), recording.Recorder(str(log), "test"))
    request = tasks_v2.CreateTaskRequest(parent="projects/p/locations/l/queues/q")
    with pytest.raises(AlreadyExists):
        client.create_task(request=request)
    [create] = oplog.of_kind(oplog.read(log), oplog.TASK_CREATE)
    assert create.get("outcome") == "exists"


def test_a_publish_is_recorded_with_its_size(
    settings: Settings, topology: Topology, log: Path
) -> None:
    publisher = events.Events(
        recording.publisher(events.build_publisher(), recording.Recorder(str(log), "test")),
        project=settings.project_id,
    )

    publisher.publish(topology.topics.results, {"at": datetime(2026, 1, 1, tzinfo=UTC).isoformat()})

    [published] = oplog.of_kind(oplog.read(log), oplog.PUBLISH)
    assert published.get("topic") == topology.topics.results
    assert published.get("bytes") == len('{"at":"2026-01-01T00:00:00+00:00"}')
