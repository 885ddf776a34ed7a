"""The `gcloud tasks` CLI pointed at the emulator's REST port."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cloud_tasks_helpers import unique_id

from relayflow.emulators.cloud_tasks.testing import EmulatorProcess, RecordingTarget

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud not installed")

PROJECT = "test-project"
LOCATION = "us-central1"


@pytest.fixture
def gcloud(emulator: EmulatorProcess, tmp_path: Path) -> Any:
    env = {
        **os.environ,
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDTASKS": f"{emulator.rest_url}/",
        "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
        "CLOUDSDK_CORE_PROJECT": PROJECT,
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud-config"),  # never the user's own config
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["gcloud", "tasks", *args, f"--location={LOCATION}"]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    return run


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(result.stdout)


def test_queue_lifecycle_and_tasks_with_gcloud(gcloud: Any, target: RecordingTarget) -> None:
    queue = unique_id()
    gcloud("queues", "create", queue, "--max-attempts=5", "--min-backoff=1s")

    described = as_json(gcloud("queues", "describe", queue, "--format=json"))
    listed = as_json(gcloud("queues", "list", "--format=json"))
    gcloud("queues", "pause", queue)
    gcloud(
        "create-http-task", "t-1", f"--queue={queue}", f"--url={target.url('/cli')}",
        "--method=PUT", "--body-content=hello", "--header=X-From:cli",
    )  # fmt: skip
    tasks = as_json(gcloud("list", f"--queue={queue}", "--format=json"))
    gcloud("queues", "resume", queue)
    hit = target.hits_for("/cli", 1)[0]
    duplicate = gcloud(
        "create-http-task", "t-1", f"--queue={queue}", f"--url={target.url('/cli')}", check=False
    )
    gcloud("queues", "delete", queue)
    missing = gcloud("queues", "describe", queue, check=False)

    assert described["retryConfig"]["maxAttempts"] == 5
    assert described["retryConfig"]["minBackoff"] == "1s"
    assert described["rateLimits"]["maxDispatchesPerSecond"] == 500
    assert described["state"] == "RUNNING"
    assert described["name"] in [q["name"] for q in listed]
    assert [t["name"].rsplit("/", 1)[1] for t in tasks] == ["t-1"]
    assert (hit.method, hit.body, hit.headers["X-From"]) == ("PUT", b"hello", "cli")
    assert duplicate.returncode != 0 and "ALREADY_EXISTS" in duplicate.stderr
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr
