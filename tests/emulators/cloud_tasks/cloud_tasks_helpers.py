"""Helpers the Cloud Tasks emulator tests share (imported by name: a module called `conftest`
would be another directory's when one run collects several)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions
from google.protobuf import duration_pb2

LOCATION = "projects/test-project/locations/us-central1"


def unique_id(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def seconds(value: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromMicroseconds(round(value * 1_000_000))
    return duration


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
