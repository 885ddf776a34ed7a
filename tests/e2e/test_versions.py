"""Removing a flow version on the local stack: `relayflow versions check` fails, naming the
version and its flows, while flows wait on a version the app about to be deployed drops, and
passes once they have drained; `relayflow drain` shows how many are left until none is, exit 0
(its timeout, exit 1: tests/unit/test_cli_versions.py). The stack's app registers approval v1,
whose flows wait for a signal: they run until a person (here, the test) decides."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest
import requests

from tests.e2e.conftest import Harness
from tests.e2e.test_cli import RELAYFLOW, _run
from tests.e2e.test_signals import waiting

pytestmark = pytest.mark.e2e
NEW_APP = "tests.e2e.apps.without_approval:build_registry"


def reject_every_waiting_approval(harness: Harness) -> int:
    """End every approval flow that waits (this test's, and any another test left), as the
    people deciding would; how many."""
    api = harness.url(harness.ports.api, "/flows")
    listed = requests.get(
        api, params={"flow": "approval", "status": "RUNNING", "limit": 500}, timeout=10
    )
    listed.raise_for_status()
    for flow in listed.json()["flows"]:
        sent = requests.post(
            harness.url(harness.ports.api, f"/flows/{flow['flow_id']}/signals/reject"),
            params={"tenant": flow["tenant"]},
            json={"reason": "draining approval v1", "data": {}},
            timeout=10,
        )
        assert sent.status_code in (200, 409), sent.text  # 409: it ended meanwhile
    return len(listed.json()["flows"])


def test_a_deploy_that_drops_a_version_flows_wait_on_fails_the_check_until_they_drain(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given an approval flow waiting for a decision, on approval v1
    waiting(harness, new_id("drain"))

    # then an app that drops approval fails the check, naming the version and its flows
    refused = _run(harness, "versions", "check", "--app", NEW_APP)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"error: {NEW_APP} no longer registers approval v1" in refused.stdout
    assert "flows not ended run on it (RUNNING" in refused.stdout

    # when a drain runs while the flows are decided
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYFLOW_API_")}
    drain = subprocess.Popen(
        [RELAYFLOW, "drain", "--flow", "approval", "--version", "1", "--interval-s", "0.3",
         "--timeout-s", "60"],
        env=env | harness.stack.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert drain.stdout is not None
        note = drain.stdout.readline()  # approval v1 is the newest: new flows still start on it
        assert note.startswith("note: v1 is the newest approval version"), note
        first = drain.stdout.readline()  # it has counted once: the flows still wait
        assert first.startswith("approval v1: ") and " not ended (RUNNING " in first, first
        assert reject_every_waiting_approval(harness) >= 1
        rest, errors = drain.communicate(timeout=60)
    finally:
        drain.kill()
    # then it showed none left and exits 0
    assert drain.returncode == 0, errors
    assert "approval v1: 0 not ended" in rest
    assert rest.rstrip().endswith("approval v1 is drained: no flow runs on it")

    # and the same deploy now passes the check
    passed = _run(harness, "versions", "check", "--app", NEW_APP)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "ok: no version that flows still run on is dropped" in passed.stdout
