"""Queue methods through the official client, over gRPC and over REST."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from cloud_tasks_helpers import LOCATION, seconds, unique_id
from google.api_core import exceptions
from google.cloud import tasks_v2
from google.protobuf import field_mask_pb2

from relayflow.emulators.cloud_tasks.testing import EmulatorProcess

# Over REST, google-api-core maps by HTTP status: 409 -> Conflict (AlreadyExists is a subclass,
# raised over gRPC) and 400 -> BadRequest (InvalidArgument's base), exactly as with the service.
ALREADY_EXISTS = exceptions.Conflict
INVALID = exceptions.BadRequest


def queue_name(queue_id: str | None = None) -> str:
    return f"{LOCATION}/queues/{queue_id or unique_id()}"


def test_a_new_queue_gets_the_service_defaults(client: Any) -> None:
    name = queue_name()

    queue = client.create_queue(parent=LOCATION, queue={"name": name})

    assert queue.name == name
    assert queue.state == tasks_v2.Queue.State.RUNNING
    assert queue.rate_limits.max_dispatches_per_second == 500
    assert queue.rate_limits.max_burst_size == 100
    assert queue.rate_limits.max_concurrent_dispatches == 1000
    assert queue.retry_config.max_attempts == 100
    assert queue.retry_config.min_backoff.total_seconds() == 0.1
    assert queue.retry_config.max_backoff.total_seconds() == 3600
    assert queue.retry_config.max_doublings == 16
    assert client.get_queue(name=name) == queue
    client.delete_queue(name=name)


def test_queue_lifecycle(client: Any) -> None:
    name = queue_name()
    client.create_queue(
        parent=LOCATION,
        queue={"name": name, "retry_config": {"max_attempts": 7, "min_backoff": seconds(2)}},
    )

    with pytest.raises(ALREADY_EXISTS):
        client.create_queue(parent=LOCATION, queue={"name": name})
    paused = client.pause_queue(name=name)
    resumed = client.resume_queue(name=name)
    purged = client.purge_queue(name=name)
    client.delete_queue(name=name)

    assert paused.state == tasks_v2.Queue.State.PAUSED
    assert resumed.state == tasks_v2.Queue.State.RUNNING
    assert purged.purge_time.timestamp() > 0
    assert purged.retry_config.max_attempts == 7
    with pytest.raises(exceptions.NotFound):
        client.get_queue(name=name)
    with pytest.raises(exceptions.NotFound):
        client.delete_queue(name=name)


def test_update_queue_changes_only_the_masked_fields(client: Any) -> None:
    name = queue_name()
    client.create_queue(parent=LOCATION, queue={"name": name, "retry_config": {"max_attempts": 7}})

    updated = client.update_queue(
        queue={"name": name, "rate_limits": {"max_dispatches_per_second": 10}},
        update_mask=field_mask_pb2.FieldMask(paths=["rate_limits.max_dispatches_per_second"]),
    )

    assert updated.rate_limits.max_dispatches_per_second == 10
    assert updated.rate_limits.max_burst_size == 2
    assert updated.retry_config.max_attempts == 7
    client.delete_queue(name=name)


@pytest.mark.parametrize("path", ["bogus", "rate_limits.bogus", "retry_config.max_attempts.x"])
def test_update_queue_refuses_an_unknown_mask_path(client: Any, make_queue: Any, path: str) -> None:
    queue = make_queue(retry_config={"max_attempts": 7})

    with pytest.raises(INVALID, match="update_mask"):
        client.update_queue(
            queue={"name": queue.name, "retry_config": {"max_attempts": 3}},
            update_mask=field_mask_pb2.FieldMask(paths=["retry_config.max_attempts", path]),
        )

    assert client.get_queue(name=queue.name).retry_config.max_attempts == 7


def test_update_queue_mask_error_over_rest_has_googles_json_shape(
    emulator: EmulatorProcess, make_queue: Any
) -> None:
    queue = make_queue()
    request = urllib.request.Request(
        f"{emulator.rest_url}/v2/{queue.name}?updateMask=bogus",
        data=json.dumps({"name": queue.name}).encode(),
        headers={"Content-Type": "application/json"},
        method="PATCH",
    )

    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request)

    assert raised.value.code == 400
    error = json.loads(raised.value.read())["error"]
    assert error["code"] == 400
    assert error["status"] == "INVALID_ARGUMENT"
    assert "bogus" in error["message"]


def test_update_queue_creates_a_missing_queue(client: Any) -> None:
    name = queue_name()

    created = client.update_queue(queue={"name": name})

    assert client.get_queue(name=name) == created
    client.delete_queue(name=name)


def test_list_queues_pages(client: Any) -> None:
    location = f"projects/{unique_id('p')}/locations/europe-west1"
    names = sorted(f"{location}/queues/q{i}" for i in range(5))
    for name in names:
        client.create_queue(parent=location, queue={"name": name})

    first = client.list_queues(request={"parent": location, "page_size": 2})
    listed = [q.name for q in first]  # the pager follows next_page_token
    pages = list(client.list_queues(request={"parent": location, "page_size": 2}).pages)

    assert listed == names
    assert [len(p.queues) for p in pages] == [2, 2, 1]
    paused = client.pause_queue(name=names[0])
    assert [
        q.name for q in client.list_queues(request={"parent": location, "filter": "state: PAUSED"})
    ] == [paused.name]
    for name in names:
        client.delete_queue(name=name)


@pytest.mark.parametrize(
    ("queue", "message"),
    [
        ({"name": f"{LOCATION}/queues/bad_id"}, "queue id"),
        ({"name": "projects/other/locations/us-central1/queues/q"}, "parent location"),
        ({"name": queue_name(), "rate_limits": {"max_dispatches_per_second": 501}}, "500"),
        ({"name": queue_name(), "rate_limits": {"max_concurrent_dispatches": 5001}}, "5000"),
        ({"name": queue_name(), "retry_config": {"max_attempts": -2}}, "max_attempts"),
        (
            {
                "name": queue_name(),
                "retry_config": {"min_backoff": seconds(9), "max_backoff": seconds(1)},
            },
            "min_backoff",
        ),
    ],
)
def test_invalid_queues_are_refused_with_the_reason(
    client: Any, queue: dict[str, Any], message: str
) -> None:
    with pytest.raises(INVALID, match=message):
        client.create_queue(parent=LOCATION, queue=queue)


def test_rest_errors_have_googles_json_shape(emulator: EmulatorProcess) -> None:
    url = f"{emulator.rest_url}/v2/{LOCATION}/queues/does-not-exist"

    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(url)

    body = json.loads(raised.value.read())
    assert raised.value.code == 404
    assert body["error"]["code"] == 404
    assert body["error"]["status"] == "NOT_FOUND"
    assert "does-not-exist" in body["error"]["message"]


def test_iam_methods_are_unimplemented(grpc_client: Any, make_queue: Any) -> None:
    queue = make_queue()

    with pytest.raises(exceptions.MethodNotImplemented):
        grpc_client.get_iam_policy(resource=queue.name)


def test_healthz_and_stats(emulator: EmulatorProcess) -> None:
    with urllib.request.urlopen(f"{emulator.rest_url}/healthz") as response:
        assert json.loads(response.read()) == {"status": "ok"}
    with urllib.request.urlopen(f"{emulator.rest_url}/stats") as response:
        stats = json.loads(response.read())
    assert {"queued", "dispatched", "retried", "dispatch_lag_ms"} <= stats.keys()
    assert {"p50", "p99"} <= stats["dispatch_lag_ms"].keys()
