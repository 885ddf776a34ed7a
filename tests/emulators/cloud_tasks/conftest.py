"""One emulator process per session (real gRPC + REST), a fresh queue and target per test."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cloud_tasks_helpers import LOCATION, unique_id
from google.cloud import tasks_v2

from relayflow.emulators.cloud_tasks.testing import (
    EmulatorProcess,
    RecordingTarget,
    recording_target,
)


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
