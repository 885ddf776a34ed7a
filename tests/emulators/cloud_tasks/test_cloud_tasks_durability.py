"""--data-dir restarts, clean SIGTERM, and --duplicate-rate, each on its own emulator process."""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloud_tasks_helpers import LOCATION, unique_id, wait_until
from google.api_core import exceptions

from relayflow.emulators.cloud_tasks.testing import EmulatorProcess, RecordingTarget, Reply


def start(tmp_path: Path, *args: str) -> EmulatorProcess:
    return EmulatorProcess.start(log_path=tmp_path / "emulator.log", args=args)


def test_restart_keeps_queues_tasks_and_tombstones(tmp_path: Path, target: RecordingTarget) -> None:
    data_dir = str(tmp_path / "data")
    first = start(tmp_path, "--data-dir", data_dir)
    client = first.grpc_client()
    queue = client.create_queue(
        parent=LOCATION,
        queue={"name": f"{LOCATION}/queues/{unique_id()}", "retry_config": {"max_attempts": 4}},
    )
    ran = f"{queue.name}/tasks/ran"
    client.create_task(
        parent=queue.name, task={"name": ran, "http_request": {"url": target.url("/ran")}}
    )
    target.hits_for("/ran", 1)
    # An attempt still in flight at SIGTERM is finished before the process exits.
    target.script("/slow", [Reply(200, delay_s=0.5)])
    client.create_task(parent=queue.name, task={"http_request": {"url": target.url("/slow")}})
    target.hits_for("/slow", 1)
    client.pause_queue(name=queue.name)
    kept = [f"{queue.name}/tasks/kept-{i}" for i in range(3)]
    for name in kept:
        client.create_task(
            parent=queue.name,
            task={"name": name, "http_request": {"url": target.url("/kept"), "body": b"k"}},
        )

    assert first.stop() == 0

    with start(tmp_path, "--data-dir", data_dir) as second:
        client = second.grpc_client()
        restored = client.get_queue(name=queue.name)
        listed = [t.name for t in client.list_tasks(parent=queue.name)]
        with pytest.raises(exceptions.AlreadyExists):
            client.create_task(
                parent=queue.name, task={"name": ran, "http_request": {"url": target.url("/ran")}}
            )
        client.resume_queue(name=queue.name)
        hits = target.hits_for("/kept", 3)

        assert restored.retry_config.max_attempts == 4
        assert restored.state == restored.State.PAUSED
        assert listed == kept
        assert sorted(h.headers["X-CloudTasks-TaskName"] for h in hits) == [
            "kept-0",
            "kept-1",
            "kept-2",
        ]
        assert {h.body for h in hits} == {b"k"}
        assert target.no_hit_within(0.3)  # nothing twice, the finished /slow task not again
        wait_until(lambda: not list(client.list_tasks(parent=queue.name)))


@pytest.fixture(scope="module")
def duplicating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    log_path = tmp_path_factory.mktemp("dup") / "emulator.log"
    with EmulatorProcess.start(log_path=log_path, args=("--duplicate-rate", "1")) as emulator:
        yield emulator


def test_duplicate_rate_one_delivers_every_task_twice(
    duplicating: EmulatorProcess, target: RecordingTarget
) -> None:
    client: Any = duplicating.grpc_client()
    queue = client.create_queue(parent=LOCATION, queue={"name": f"{LOCATION}/queues/{unique_id()}"})
    task = client.create_task(parent=queue.name, task={"http_request": {"url": target.url("/dup")}})

    hits = target.hits_for("/dup", 2)

    assert {h.headers["X-CloudTasks-TaskName"] for h in hits} == {task.name.rsplit("/", 1)[1]}
    assert {h.headers["X-CloudTasks-TaskRetryCount"] for h in hits} == {"0"}
    assert target.no_hit_within(0.3)


def test_a_duplicate_is_in_flight_with_the_first_delivery(
    duplicating: EmulatorProcess, target: RecordingTarget
) -> None:
    client: Any = duplicating.grpc_client()
    # One task at a time: the duplicate rides on its task's slot and frees none of its own.
    queue = client.create_queue(
        parent=LOCATION,
        queue={
            "name": f"{LOCATION}/queues/{unique_id()}",
            "rate_limits": {"max_concurrent_dispatches": 1},
        },
    )
    target.script("/overlap", [Reply(200, delay_s=0.4)])
    before = stats(duplicating)
    for i in range(3):
        task = {"name": f"{queue.name}/tasks/t{i}", "http_request": {"url": target.url("/overlap")}}
        client.create_task(parent=queue.name, task=task)

    hits = target.hits_for("/overlap", 6)

    by_task: dict[str, list[float]] = {}
    for hit in hits:
        by_task.setdefault(hit.headers["X-CloudTasks-TaskName"], []).append(hit.at)
    starts = sorted(by_task.items(), key=lambda item: min(item[1]))
    # Both deliveries of a task arrive before either could have been answered (0.4 s)...
    assert all(len(ats) == 2 and max(ats) - min(ats) < 0.2 for _, ats in starts)
    # ...and the next task waits for its predecessor's first delivery to be answered.
    firsts = [min(ats) for _, ats in starts]
    assert all(b - a >= 0.4 - 0.02 for a, b in itertools.pairwise(firsts))
    wait_until(lambda: stats(duplicating)["queued"] == before["queued"], timeout_s=5.0)
    wait_until(lambda: stats(duplicating)["in_flight"] == 0, timeout_s=5.0)
    assert stats(duplicating)["duplicated"] - before["duplicated"] == 3


def stats(emulator: EmulatorProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"{emulator.rest_url}/stats") as response:
        result: dict[str, Any] = json.loads(response.read())
        return result
