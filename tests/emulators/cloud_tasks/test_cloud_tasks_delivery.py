"""Dispatch, measured at a local target: timing, headers, retries, limits, pause, RunTask."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from cloud_tasks_helpers import fast_retry, gone, seconds, wait_until
from google.api_core import exceptions
from google.cloud import tasks_v2
from google.protobuf import timestamp_pb2

from relayflow.emulators.cloud_tasks.testing import Hit, RecordingTarget, Reply

# Slack for one dispatch on a loaded 2-core machine: the emulator's own lag is ~1-2 ms.
SLACK_S = 0.05


def at(epoch_s: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMicroseconds(round(epoch_s * 1_000_000))
    return stamp


def gaps(hits: list[Hit]) -> list[float]:
    return [b.at - a.at for a, b in itertools.pairwise(hits)]


def create(client: Any, queue: tasks_v2.Queue, url: str, **task: Any) -> tasks_v2.Task:
    return client.create_task(parent=queue.name, task={"http_request": {"url": url}, **task})


def test_delivery_waits_for_schedule_time_then_comes_promptly(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue()
    base = time.time() + 0.3
    etas = [base + 0.1 * i for i in range(5)]
    for eta in reversed(etas):
        create(grpc_client, queue, target.url("/timed"), schedule_time=at(eta))

    hits = target.hits_for("/timed", 5)

    for hit, eta in zip(hits, etas, strict=True):
        assert float(hit.headers["X-CloudTasks-TaskETA"]) == pytest.approx(eta, abs=1e-6)
        assert eta <= hit.at <= eta + 0.1


def test_dispatch_sends_the_request_as_given_plus_cloud_tasks_headers(
    client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue()
    task = client.create_task(
        parent=queue.name,
        task={
            "name": f"{queue.name}/tasks/hdr-1",
            "http_request": {
                "url": target.url("/hdr?x=1"),
                "http_method": tasks_v2.HttpMethod.PUT,
                "headers": {"Content-Type": "application/json", "X-Custom": "yes"},
                "body": b'{"a": 1}',
            },
        },
    )

    hit = target.hits_for("/hdr", 1)[0]

    assert (hit.method, hit.body) == ("PUT", b'{"a": 1}')
    assert hit.headers["Content-Type"] == "application/json"
    assert hit.headers["X-Custom"] == "yes"
    assert hit.headers["User-Agent"] == "Google-Cloud-Tasks"
    assert hit.headers["X-CloudTasks-QueueName"] == queue.name.rsplit("/", 1)[1]
    assert hit.headers["X-CloudTasks-TaskName"] == "hdr-1"
    assert hit.headers["X-CloudTasks-TaskRetryCount"] == "0"
    assert hit.headers["X-CloudTasks-TaskExecutionCount"] == "0"
    assert float(hit.headers["X-CloudTasks-TaskETA"]) == pytest.approx(
        task.schedule_time.timestamp(), abs=1e-6
    )
    assert "X-CloudTasks-TaskPreviousResponse" not in hit.headers
    assert "X-CloudTasks-TaskRetryReason" not in hit.headers


def test_retries_report_previous_response_and_skip_5xx_in_execution_count(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue(retry_config=fast_retry())
    target.script("/flaky", [Reply(500), Reply(404), Reply(200)])
    task = create(grpc_client, queue, target.url("/flaky"))

    hits = target.hits_for("/flaky", 3)

    headers = [h.headers for h in hits]
    assert [h["X-CloudTasks-TaskRetryCount"] for h in headers] == ["0", "1", "2"]
    assert [h["X-CloudTasks-TaskExecutionCount"] for h in headers] == ["0", "0", "1"]
    assert [h.get("X-CloudTasks-TaskPreviousResponse") for h in headers] == [None, "500", "404"]
    assert all(h.get("X-CloudTasks-TaskRetryReason") for h in headers[1:])
    assert target.no_hit_within(0.2)
    with pytest.raises(exceptions.NotFound):
        grpc_client.get_task(name=task.name)


def test_failed_task_records_its_attempts(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue(retry_config=fast_retry(min_backoff=seconds(5), max_backoff=seconds(5)))
    target.script("/fails", [Reply(503)])
    task = create(grpc_client, queue, target.url("/fails"))
    target.hits_for("/fails", 1)

    wait_until(lambda: grpc_client.get_task(name=task.name).response_count == 1)
    seen = grpc_client.get_task(name=task.name)

    assert seen.dispatch_count == 1
    assert seen.first_attempt.dispatch_time.timestamp() > 0
    assert seen.last_attempt.response_status.code == 14  # UNAVAILABLE for HTTP 503
    assert seen.schedule_time.timestamp() >= seen.last_attempt.response_time.timestamp() + 4.9


def test_retry_schedule_doubles_then_grows_linearly_then_caps(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    # The documented 10 s / 300 s / 3 doublings schedule, scaled down 200 times.
    queue = make_queue(
        retry_config={
            "max_attempts": 9,
            "min_backoff": seconds(0.05),
            "max_backoff": seconds(1.5),
            "max_doublings": 3,
        }
    )
    target.script("/down", [Reply(500)])
    create(grpc_client, queue, target.url("/down"))

    hits = target.hits_for("/down", 9, timeout_s=15)

    expected = [0.05, 0.1, 0.2, 0.4, 0.8, 1.2, 1.5, 1.5]
    for measured, wanted in zip(gaps(hits), expected, strict=True):
        assert wanted <= measured <= wanted + SLACK_S
    assert target.no_hit_within(0.3)


def test_max_attempts_stops_retries(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue(retry_config=fast_retry(max_attempts=3))
    target.script("/never", [Reply(500)])
    task = create(grpc_client, queue, target.url("/never"))

    assert len(target.hits_for("/never", 3)) == 3
    assert target.no_hit_within(0.5)
    with pytest.raises(exceptions.NotFound):
        grpc_client.get_task(name=task.name)


def test_unlimited_attempts_keep_retrying(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue(retry_config=fast_retry(max_attempts=-1, max_backoff=seconds(0.05)))
    target.script("/forever", [Reply(500)])
    task = create(grpc_client, queue, target.url("/forever"))

    assert len(target.hits_for("/forever", 8)) == 8
    grpc_client.delete_task(name=task.name)


def test_max_retry_duration_extends_past_max_attempts(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    # Both limits must be reached: 2 attempts are spent long before 0.5 s is.
    retry = fast_retry(
        max_attempts=2,
        min_backoff=seconds(0.1),
        max_backoff=seconds(0.1),
        max_retry_duration=seconds(0.5),
    )
    queue = make_queue(retry_config=retry)
    target.script("/slow-fail", [Reply(500)])
    task = create(grpc_client, queue, target.url("/slow-fail"))

    hits = target.hits_for("/slow-fail", 6)

    assert target.no_hit_within(0.4)
    assert 0.5 <= hits[-1].at - hits[0].at <= 0.5 + 2 * SLACK_S
    with pytest.raises(exceptions.NotFound):
        grpc_client.get_task(name=task.name)


def test_max_retry_duration_alone_bounds_unlimited_attempts(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    retry = fast_retry(
        max_attempts=-1,
        min_backoff=seconds(0.1),
        max_backoff=seconds(0.1),
        max_retry_duration=seconds(0.3),
    )
    queue = make_queue(retry_config=retry)
    target.script("/bounded", [Reply(500)])
    create(grpc_client, queue, target.url("/bounded"))

    hits = target.hits_for("/bounded", 4)

    assert target.no_hit_within(0.4)
    assert hits[-1].at - hits[0].at >= 0.3


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(
    grpc_client: Any, make_queue: Any, target: RecordingTarget, status: int
) -> None:
    queue = make_queue(retry_config=fast_retry())
    target.script("/busy", [Reply(status, headers={"Retry-After": "1"}), Reply(200)])
    create(grpc_client, queue, target.url("/busy"))

    first, second = target.hits_for("/busy", 2)

    assert 1.0 <= second.at - first.at <= 1.0 + SLACK_S


def test_max_dispatches_per_second_paces_dispatch(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue(rate_limits={"max_dispatches_per_second": 5})  # burst 1
    for _ in range(5):
        create(grpc_client, queue, target.url("/paced"))

    hits = target.hits_for("/paced", 5)

    assert all(gap >= 0.2 - 0.01 for gap in gaps(hits))


def test_max_concurrent_dispatches_caps_in_flight_requests(
    grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue(rate_limits={"max_concurrent_dispatches": 2})
    target.script("/busy-worker", [Reply(200, delay_s=0.3)])
    for _ in range(6):
        create(grpc_client, queue, target.url("/busy-worker"))

    arrivals = sorted(h.at for h in target.hits_for("/busy-worker", 6))

    # At most two at a time: each pair starts only after the previous pair answered.
    assert arrivals[2] - arrivals[0] >= 0.3 - 0.01
    assert arrivals[4] - arrivals[2] >= 0.3 - 0.01


def test_a_paused_queue_accepts_tasks_and_dispatches_none(
    client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue()
    client.pause_queue(name=queue.name)
    for _ in range(3):
        create(client, queue, target.url("/held"))

    assert target.no_hit_within(0.3)
    assert len(list(client.list_tasks(parent=queue.name))) == 3
    client.resume_queue(name=queue.name)
    assert len(target.hits_for("/held", 3)) == 3


def test_purge_deletes_the_queued_tasks(
    client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue()
    client.pause_queue(name=queue.name)
    for _ in range(3):
        create(client, queue, target.url("/purged"))

    client.purge_queue(name=queue.name)
    client.resume_queue(name=queue.name)

    assert list(client.list_tasks(parent=queue.name)) == []
    assert target.no_hit_within(0.3)


def test_run_task_dispatches_now_even_on_a_paused_queue(
    client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue()
    client.pause_queue(name=queue.name)
    task = create(client, queue, target.url("/run"), schedule_time=at(time.time() + 3600))

    client.run_task(name=task.name)
    hit = target.hits_for("/run", 1, timeout_s=2)[0]

    assert hit.headers["X-CloudTasks-TaskName"] == task.name.rsplit("/", 1)[1]
    wait_until(gone(client, task.name))  # deleted once the target's 2xx is recorded
    with pytest.raises(exceptions.NotFound):
        client.run_task(name=task.name)
