"""The relayflow command against a running stack: publish, status, watch, list, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from relayflow.core.state import Status
from tests.e2e.conftest import Harness

pytestmark = pytest.mark.e2e
RELAYFLOW = str(Path(sys.executable).parent / "relayflow")


def _run(harness: Harness | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    if harness is not None:
        env |= harness.stack.env()
    return subprocess.run(
        [RELAYFLOW, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_publish_status_watch_and_list(harness: Harness, new_id: Callable[[str], str]) -> None:
    # given a flow published with the CLI
    flow_id = new_id("cli")
    published = _run(
        harness, "publish", "registration", "--input", json.dumps({"resource": flow_id}),
        "--flow-id", flow_id,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    assert f"flow id {flow_id}" in published.stdout

    # when it has ended, watch replays each step and poll with its delay, and exits 0
    watched = _run(harness, "watch", flow_id, "--timeout-s", "60")
    assert watched.returncode == 0, watched.stderr
    assert "await_registration   poll 0" in watched.stdout
    assert "next in" in watched.stdout
    assert "status    SUCCEEDED" in watched.stdout

    # then status and list show it
    status = _run(harness, "status", flow_id, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == Status.SUCCEEDED.value
    listed = _run(harness, "list", "--status", "succeeded", "--limit", "500")
    assert flow_id in listed.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("publish", "registration", "--input", "[1]"), "must be a JSON object, got list"),
        (("publish", "registration", "--input", "{oops"), "not JSON"),
        (("publish", "registration", "--flow-id", "a/b"), "does not match"),
        (("list", "--status", "sleeping"), "is not one of"),
        (("list", "--limit", "0"), "is not an integer in 1..100000"),
    ],
)
def test_bad_arguments_exit_2_saying_what_is_wrong(
    harness: Harness, args: tuple[str, ...], says: str
) -> None:
    result = _run(harness, *args)
    assert result.returncode == 2
    assert says in result.stderr


def test_an_unknown_flow_id_exits_1(harness: Harness) -> None:
    result = _run(harness, "status", "no-such-flow")
    assert result.returncode == 1
    assert "no flow with id 'no-such-flow'" in result.stderr


def test_without_the_local_env_the_cli_says_how_to_get_it() -> None:
    result = _run(None, "status", "anything")
    assert result.returncode == 2
    assert "source .relayflow/local/env" in result.stderr
