"""Task methods through the official client, over gRPC and over REST: names, dedup, views."""

from __future__ import annotations

import base64
import datetime
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from cloud_tasks_helpers import LOCATION, gone, seconds, wait_until
from google.api_core import exceptions
from google.cloud import tasks_v2
from google.protobuf import timestamp_pb2

from relayflow.emulators.cloud_tasks.testing import EmulatorProcess, RecordingTarget

ALREADY_EXISTS = exceptions.Conflict  # AlreadyExists over gRPC, 409 Conflict over REST
INVALID = exceptions.BadRequest  # InvalidArgument over gRPC, 400 over REST
FULL = tasks_v2.Task.View.FULL


def later(seconds_ahead: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_ahead)
    )
    return stamp


def http_task(url: str, **fields: Any) -> dict[str, Any]:
    return {"http_request": {"url": url, "body": b"payload"}, **fields}


def test_named_task_round_trips(client: Any, make_queue: Any) -> None:
    queue = make_queue()
    name = f"{queue.name}/tasks/order-42_a"
    schedule = later(3600)

    created = client.create_task(
        parent=queue.name,
        task={
            "name": name,
            "schedule_time": schedule,
            "dispatch_deadline": seconds(30),
            "http_request": {
                "url": "https://example.com/hook",
                "http_method": tasks_v2.HttpMethod.PUT,
                "headers": {"X-Flow": "f1"},
                "body": b"{}",
            },
        },
    )
    fetched = client.get_task(request={"name": name, "response_view": FULL})

    assert created.name == name
    assert created.http_request.body == b""  # BASIC view omits the body
    assert fetched.http_request.body == b"{}"
    assert fetched.http_request.http_method == tasks_v2.HttpMethod.PUT
    assert fetched.http_request.headers["X-Flow"] == "f1"
    assert fetched.dispatch_deadline.total_seconds() == 30
    assert fetched.schedule_time.timestamp() == pytest.approx(
        schedule.ToDatetime(datetime.UTC).timestamp(), abs=1e-6
    )
    assert fetched.create_time.timestamp() <= fetched.schedule_time.timestamp()
    assert fetched.dispatch_count == 0
    assert fetched.view == FULL


def test_unnamed_tasks_get_generated_names(client: Any, make_queue: Any) -> None:
    queue = make_queue()

    first = client.create_task(parent=queue.name, task=http_task("http://h/x"))
    second = client.create_task(parent=queue.name, task=http_task("http://h/x"))

    assert first.name.startswith(f"{queue.name}/tasks/")
    assert first.name != second.name
    assert first.dispatch_deadline.total_seconds() == 600


def test_a_live_name_is_refused(client: Any, make_queue: Any) -> None:
    queue = make_queue()
    task = http_task("http://h/x", name=f"{queue.name}/tasks/dup", schedule_time=later(3600))
    client.create_task(parent=queue.name, task=task)

    with pytest.raises(ALREADY_EXISTS):
        client.create_task(parent=queue.name, task=task)


def test_a_deleted_name_stays_reserved(client: Any, make_queue: Any) -> None:
    queue = make_queue()
    task = http_task("http://h/x", name=f"{queue.name}/tasks/gone", schedule_time=later(3600))
    client.create_task(parent=queue.name, task=task)
    client.delete_task(name=task["name"])

    with pytest.raises(exceptions.NotFound):
        client.get_task(name=task["name"])
    with pytest.raises(ALREADY_EXISTS, match="too recently"):
        client.create_task(parent=queue.name, task=task)


def test_a_name_that_ran_stays_reserved(
    client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue()
    task = http_task(target.url("/ran"), name=f"{queue.name}/tasks/ran-once")
    client.create_task(parent=queue.name, task=task)
    target.hits_for("/ran", 1)
    # The target has answered; the task is deleted (and tombstoned) once the emulator has
    # read that answer, a moment later.
    wait_until(gone(client, task["name"]), timeout_s=5.0)

    with pytest.raises(ALREADY_EXISTS, match="too recently"):
        client.create_task(parent=queue.name, task=task)


def test_list_tasks_pages_and_views(client: Any, make_queue: Any) -> None:
    queue = make_queue()
    names = sorted(f"{queue.name}/tasks/t{i}" for i in range(5))
    for name in names:
        client.create_task(
            parent=queue.name, task=http_task("http://h/x", name=name, schedule_time=later(600))
        )

    basic = list(client.list_tasks(request={"parent": queue.name, "page_size": 2}))
    pages = list(client.list_tasks(request={"parent": queue.name, "page_size": 2}).pages)
    full = list(client.list_tasks(request={"parent": queue.name, "response_view": FULL}))

    assert [t.name for t in basic] == names
    assert [len(p.tasks) for p in pages] == [2, 2, 1]
    assert {t.http_request.body for t in basic} == {b""}
    assert {t.http_request.body for t in full} == {b"payload"}


def test_a_task_for_a_missing_queue_is_not_found(client: Any) -> None:
    with pytest.raises(exceptions.NotFound):
        client.create_task(parent=f"{LOCATION}/queues/missing", task=http_task("http://h/x"))


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (http_task("http://h/x", name="{queue}/tasks/bad.id"), "task id"),
        (http_task("http://h/x", name=f"{LOCATION}/queues/other/tasks/t"), "parent queue"),
        (http_task("ftp://h/x"), "http"),
        (http_task("http://h/x", schedule_time=later(31 * 86400)), "30 days"),
        (http_task("http://h/x", dispatch_deadline=seconds(10)), "15 seconds"),
        (http_task("http://h/x", dispatch_deadline=seconds(3600)), "30 minutes"),
        ({"http_request": {"url": "http://h/x", "body": b"x" * (1024 * 1024 + 1)}}, "1 MB"),
        ({"http_request": {"url": "http://h/x", "http_method": 2, "body": b"x"}}, "POST"),
        ({}, "http_request"),
        # A CR or LF would split the request: the service refuses it here, at create time.
        ({"http_request": {"url": "http://h/x", "headers": {"X-A": "1\r\nX-B: 2"}}}, "X-A"),
        ({"http_request": {"url": "http://h/x", "headers": {"X-A": "line\nbreak"}}}, "control"),
        ({"http_request": {"url": "http://h/x", "headers": {"X-A": "carriage\r"}}}, "control"),
        ({"http_request": {"url": "http://h/x", "headers": {"Bad Name": "v"}}}, "header name"),
    ],
)
def test_invalid_tasks_are_refused_with_the_reason(
    client: Any, make_queue: Any, task: dict[str, Any], message: str
) -> None:
    queue = make_queue()
    if "name" in task:
        task = {**task, "name": task["name"].replace("{queue}", queue.name)}

    with pytest.raises(INVALID, match=message):
        client.create_task(parent=queue.name, task=task)


def test_rest_body_must_be_valid_base64(emulator: EmulatorProcess, make_queue: Any) -> None:
    queue = make_queue()
    url = f"{emulator.rest_url}/v2/{queue.name}/tasks"
    later_s = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()

    def create(body: str, task_id: str) -> tuple[int, Any]:
        task = {
            "name": f"{queue.name}/tasks/{task_id}",
            "scheduleTime": later_s,
            "httpRequest": {"url": "http://h/x", "body": body},
        }
        return post_json(url, {"task": task})

    # URL-safe and unpadded base64 are base64 too: stored exactly.
    good = create("-_8", "urlsafe")
    # "aGVsbG8*" would decode leniently to b"hello" with the "*" dropped: refused instead.
    bad = [create(body, f"bad-{i}") for i, body in enumerate(["aGVsbG8*", "aGVs bG8=", "a"])]

    assert good[0] == 200
    stored = get_json(f"{emulator.rest_url}/v2/{queue.name}/tasks/urlsafe?responseView=FULL")
    assert base64.b64decode(stored["httpRequest"]["body"]) == b"\xfb\xff"
    for status, body in bad:
        assert status == 400
        assert body["error"]["status"] == "INVALID_ARGUMENT"
        assert "Base64" in body["error"]["message"]
        assert "task.http_request.body" in body["error"]["message"]
    listed = get_json(f"{emulator.rest_url}/v2/{queue.name}/tasks")["tasks"]
    assert [t["name"].rsplit("/", 1)[1] for t in listed] == ["urlsafe"]


def post_json(url: str, payload: Any) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url) as response:
        return json.loads(response.read())
