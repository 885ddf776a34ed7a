"""Reset to a step on the whole local stack, through the CLI (issue 23): a registration flow
that succeeded is reset to ``register``. The dry run prints what it would do and does nothing;
the reset then undoes the entity and the registration, newest first, exactly as listed, and
registers again under a fresh idempotency key: one live registration, a new one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from relayflow.core.state import Status
from tests.e2e.conftest import Harness
from tests.e2e.test_cleanup import _live
from tests.e2e.test_cli import _run

pytestmark = pytest.mark.e2e


def test_reset_to_a_step_from_the_cli_undoes_newest_first_what_its_dry_run_listed(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("reset")
    # active at once: the test waits for no poll's backoff
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: 0}})
    harness.publish({"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}})
    first = harness.wait_terminal(flow_id)
    assert first.status is Status.SUCCEEDED
    (registered,) = _live(harness, flow_id)
    args = ("reset", flow_id, "--to-step", "register", "--reason", "registered wrongly")

    dry = _run(harness, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    header, row = dry.stdout.splitlines()
    assert header.split()[:4] == ["FLOW", "ACTION", "OK", "RUN"]
    assert row.split("  ")[0] == flow_id
    assert "register, await_registration, create_entity" in row
    assert "create_entity, register" in row  # undone, newest first
    unchanged = harness.flow(flow_id)
    assert unchanged is not None and unchanged.history == first.history  # nothing done

    done = _run(harness, *args, "--wait")
    assert done.returncode == 0, done.stderr
    assert "generation 1 started" in done.stdout
    assert done.stdout.strip().endswith(f"{flow_id} is SUCCEEDED")
    record = harness.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED and record.position.generation == 1
    since = record.history[len(first.history) :]
    assert [(e.outcome, e.by) for e in since[:1]] == [("reset", "local")]
    undone = [e.step for e in since if e.outcome == "compensated"]
    assert undone == ["create_entity", "register"]  # as the dry run listed, in that order
    assert [e.step for e in since if e.outcome == "succeeded"] == ["register", "create_entity"]
    (again,) = _live(harness, flow_id)
    assert again != registered  # the first registration was undone; a fresh one is live
