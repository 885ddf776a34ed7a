"""A RELAYFLOW_APP that cannot be loaded stops every entry point at start, saying why.

Each process is started for real (gunicorn, functions-framework, the CLI) with a target that
names a module nobody has; none of them may start serving.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TARGET = "nobody_has_this.flows:registry"
PROBLEM = f"RELAYFLOW_APP={TARGET!r}: no module named 'nobody_has_this'"


def run(argv: list[str], cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "RELAYFLOW_APP": TARGET,
        "GOOGLE_CLOUD_PROJECT": "acme-test-1",  # not the local project: no emulator hint
        **env,
    }
    for name in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "CLOUD_TASKS_EMULATOR_HOST"):
        environ.pop(name, None)
    return subprocess.run(
        argv, cwd=cwd, env=environ, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("service", ["worker", "poller", "api"])
def test_a_service_does_not_boot(service: str) -> None:
    done = run(
        [
            str(BIN / "gunicorn"),
            "--bind",
            "127.0.0.1:0",
            "--workers",
            "1",
            f"relayflow.services.{service}.main:app",
        ]
    )
    assert done.returncode == 3  # gunicorn: "Worker failed to boot", the master stops
    assert PROBLEM in done.stderr


def test_the_start_function_does_not_boot() -> None:
    argv = [
        str(BIN / "functions-framework"),
        "--target=start_flow",
        "--source=relayflow/functions/start_flow/main.py",
        "--signature-type=cloudevent",
        "--host=127.0.0.1",
        "--port=0",
    ]
    done = run(argv)
    assert done.returncode != 0
    assert PROBLEM in done.stderr


def test_the_cli_refuses_with_exit_status_2() -> None:
    done = run([str(BIN / "relayflow"), "sweep", "--app", TARGET])
    assert done.returncode == 2
    assert (
        done.stderr.strip() == f"relayflow: {PROBLEM} (is its package installed, or on PYTHONPATH?)"
    )


def test_local_up_refuses_before_starting_anything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = run(
        [str(BIN / "relayflow"), "local", "up", "--app", TARGET, "--state-dir", str(state)],
        cwd=tmp_path,
        RELAYFLOW_BASE_PORT="18990",
    )
    assert done.returncode == 1
    assert PROBLEM in done.stderr
    assert not (state / "state.json").exists()  # nothing was started
