"""One emulator process per session (real gRPC + REST), a fresh queue and target per test."""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import tasks_v2
from google.protobuf import duration_pb2


def _see_the_real_emulators_package() -> None:
    """Under plain `pytest`, tests/emulators (no __init__.py) shadows the repo's `emulators`
    package as a namespace package, because the repo root is not on sys.path and the
    editable-install finder comes after the path finder. Put the root on the path and drop
    the shadow so `emulators.cloud_tasks` resolves to the package under test."""
    sys.path.append(str(Path(__file__).resolve().parents[3]))
    shadow = sys.modules.get("emulators")
    if shadow is not None and getattr(shadow, "__file__", None) is None:
        for name in [n for n in sys.modules if n == "emulators" or n.startswith("emulators.")]:
            del sys.modules[name]


_see_the_real_emulators_package()

from emulators.cloud_tasks.testing import (  # noqa: E402 - needs the path fix above
    EmulatorProcess,
    RecordingTarget,
    recording_target,
)

LOCATION = "projects/test-project/locations/us-central1"


@pytest.fixture(scope="session")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    log_path = Path(tmp_path_factory.mktemp("cloud-tasks")) / "emulator.log"
    emulator = EmulatorProcess.start(log_path=log_path, args=("--log-level", "DEBUG"))
    try:
        yield emulator
    finally:
        assert emulator.stop() == 0, log_path.read_text()


@pytest.fixture(scope="session")
def grpc_client(emulator: EmulatorProcess) -> Any:
    return emulator.grpc_client()


@pytest.fixture(scope="session")
def rest_client(emulator: EmulatorProcess) -> Any:
    return emulator.rest_client()


@pytest.fixture(params=["grpc", "rest"])
def client(request: pytest.FixtureRequest, grpc_client: Any, rest_client: Any) -> Any:
    """The official client, once over each transport."""
    return grpc_client if request.param == "grpc" else rest_client


@pytest.fixture
def target() -> Iterator[RecordingTarget]:
    with recording_target() as target:
        yield target


def unique_id(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def seconds(value: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromMicroseconds(round(value * 1_000_000))
    return duration


@pytest.fixture
def make_queue(grpc_client: Any) -> Iterator[Callable[..., tasks_v2.Queue]]:
    """Create a uniquely named queue (deleted after the test) with the given settings."""
    created: list[str] = []

    def make(**fields: Any) -> tasks_v2.Queue:
        name = f"{LOCATION}/queues/{unique_id()}"
        queue = grpc_client.create_queue(parent=LOCATION, queue={"name": name, **fields})
        created.append(name)
        return queue

    yield make
    for name in created:
        # A test may have deleted its queue already.
        with contextlib.suppress(Exception):
            grpc_client.delete_queue(name=name)


def fast_retry(**overrides: Any) -> dict[str, Any]:
    """A RetryConfig scaled down to test speed."""
    config: dict[str, Any] = {
        "max_attempts": 5,
        "min_backoff": seconds(0.05),
        "max_backoff": seconds(0.2),
        "max_doublings": 2,
    }
    config.update(overrides)
    return config


def wait_until(predicate: Callable[[], bool], timeout_s: float = 2.0) -> None:
    """Poll `predicate` every 10 ms until it holds; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def gone(client: Any, task_name: str) -> Callable[[], bool]:
    """A predicate: the task no longer exists."""

    def check() -> bool:
        try:
            client.get_task(name=task_name)
        except exceptions.NotFound:
            return True
        return False

    return check
