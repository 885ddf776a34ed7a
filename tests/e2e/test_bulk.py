"""A bulk retry on the whole local stack, through the CLI: flows the client API refused are
listed by a dry run, then retried server-side in paced batches while the worker is SIGKILLed
midway; every flow succeeds, each once, with one audit entry, and no registration is made
twice. (bench/bulk.py does the same with 1,000 flows failed by an outage and quotes figures.)"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import requests

from relayflow.core.state import Status
from relayflow.local import statefile
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness
from tests.e2e.test_cli import _run

pytestmark = pytest.mark.e2e
FLOWS = 20
# The client API refuses every registration for now: each flow fails at its first try.
REFUSED = [{"method": "POST", "path_prefix": "/registrations", "status": 400, "count": None}]


def _bulk(harness: Harness, bulk_id: str) -> dict[str, object]:
    url = harness.url(harness.ports.api, f"/bulk/{bulk_id}")
    answer = requests.get(url, timeout=10)
    answer.raise_for_status()
    found: dict[str, object] = answer.json()
    return found


def test_a_bulk_retry_survives_its_worker_killed_midway_and_runs_no_flow_twice(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given twenty flows the client API refused
    since = datetime.now(UTC).isoformat()
    run = new_id("bulk")
    flows = [f"{run}-{i:02d}" for i in range(FLOWS)]
    harness.client_api("POST", "/admin/faults", json=REFUSED)
    for flow_id in flows:
        body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
        harness.publish(body)
    assert {harness.wait_terminal(f).status for f in flows} == {Status.FAILED}
    harness.client_api("DELETE", "/admin/faults")

    # when an operator dry-runs a bulk retry of them
    wanted = ("--flow", "registration", "--status", "FAILED", "--since", since)
    dry = _run(harness, "bulk", "retry", *wanted, "--reason", "fixed", "--rate", "5", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"matched  {FLOWS}: {FLOWS} to retry, 0 refused" in dry.stdout
    assert "run register, await_registration" in dry.stdout
    (bulk_id,) = re.findall(r"relayflow bulk run (bulk-[0-9a-f]{12})", dry.stdout)
    assert {harness.flow(f).status for f in flows} == {Status.FAILED}  # type: ignore[union-attr]

    # and runs it (two batches of ten, 2 s apart), and the worker dies after the first
    ran = _run(harness, "bulk", "run", bulk_id, "--reason", "go")
    assert ran.returncode == 0, ran.stderr
    assert poll_until(lambda: int(_bulk(harness, bulk_id)["next_batch"]) >= 1, timeout_s=30)  # type: ignore[call-overload]
    state = statefile.load(harness.stack.state_file)
    assert state is not None
    os.killpg(next(p.pid for p in state.processes if p.name == "worker"), signal.SIGKILL)
    harness.stack.up()  # heals what died, as `relayflow local up` does

    # then it finishes, every flow succeeds, each retried once, and nothing is made twice
    followed = _run(harness, "bulk", "status", bulk_id, "--follow")
    assert followed.returncode == 0, followed.stdout + followed.stderr
    done = _bulk(harness, bulk_id)
    assert (done["state"], done["done"], done["skipped"], done["failed"]) == ("done", FLOWS, 0, 0)
    records = [harness.wait_terminal(f, timeout_s=60) for f in flows]
    assert {r.status for r in records} == {Status.SUCCEEDED}
    for record in records:
        entries = [e for e in record.history if e.bulk == bulk_id]
        assert [(e.outcome, e.by) for e in entries] == [("restarted", "local")]
        assert record.position.generation == 1
    live = harness.client_api("GET", "/stats?detail=true")["live"]["registrations_by_resource"]
    assert all(len(live[f]) == 1 for f in flows)  # one registration each: no duplicate
    previews = _run(harness, "bulk", "previews", bulk_id)
    assert previews.stdout.count(" done ") == FLOWS
