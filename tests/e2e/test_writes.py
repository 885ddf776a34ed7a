"""The registration flow's floor of writes, counted on a stack that records every operation
(``RELAYFLOW_OPS_LOG``): a flow whose registration is active at its first poll writes its
document four times — the create (which claims ``register`` for its task's first dispatch),
register's commit, the ready poll's commit (which claims ``create_entity``, run in the same
request) and create_entity's commit, which ends the flow."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import firestore

from relayflow.capacity import oplog
from relayflow.core.state import Status
from relayflow.gcp import recording
from relayflow.gcp.store import FlowStore, keys
from relayflow.local.polling import poll_until
from relayflow.local.ports import Ports
from relayflow.local.stack import Stack
from tests.e2e.conftest import E2E_BASE_PORT, FAST_POLICIES, Harness

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path]]:
    """A stack of its own whose every relayflow process records its operations."""
    log = tmp_path_factory.mktemp("ops") / "ops.jsonl"
    stack = Stack(
        ports=Ports(E2E_BASE_PORT + 700),  # +900 of the test base port: a block of its own
        state_dir=tmp_path_factory.mktemp("recorded-stack"),
        base_env={**os.environ, **FAST_POLICIES, recording.OPS_LOG_ENV: str(log)},
        sweep_interval_s=0,
    )
    stack.up()
    try:
        yield stack, log
    finally:
        stack.down()


def test_a_registration_active_at_its_first_poll_writes_its_document_four_times(
    recorded: tuple[Stack, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, log = recorded
    for name, value in stack.env().items():
        monkeypatch.setenv(name, value)
    db = firestore.Client(project="relayflow-local")
    harness = Harness(stack, FlowStore(db), db)

    # given a registration that is active at once
    flow_id = "writes-1"
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: 0.0}})
    harness.publish({"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}})

    # when the flow ends
    record = harness.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED
    assert record.polls == 1

    # then its document was written four times: created, then three commits (the last one,
    # which ended it, is logged once its write returned: a moment after the test can see it)
    def writes_of_the_flow() -> list[oplog.Op]:
        return [
            op
            for op in oplog.of_kind(oplog.read(log), oplog.FS_WRITE)
            if op.get("coll") == "flows" and op.get("id") == keys.document_id(record.key)
        ]

    def ended() -> bool:
        return any("result" in op.get("fields", []) for op in writes_of_the_flow())

    assert poll_until(ended, timeout_s=10, interval_s=0.05)
    writes = writes_of_the_flow()
    assert [op.get("kind") for op in writes] == ["create", "update", "update", "update"]
    assert [op.component for op in writes] == [
        "relayflow-start",  # the create, claiming register for its first dispatch
        "relayflow-worker",  # register's commit: no claim write before it
        "relayflow-poller",  # the ready poll, claiming create_entity to run it inline
        "relayflow-poller",  # create_entity's commit, ending the flow
    ]
