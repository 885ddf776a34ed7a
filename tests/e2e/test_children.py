"""Child flows on the local stack (bench/children_app.py, on the e2e tests' ``bench_stack``,
port block +900): an order whose charge step is a child flow succeeds with the child's output,
and a child that fails fails its parent's step. No test sleeps: it polls the store until done."""

from __future__ import annotations

import uuid

import pytest
from google.cloud import firestore

from relayflow.core.records import FlowRecord
from relayflow.core.state import TERMINAL, Status
from relayflow.gcp.events import Events, build_publisher
from relayflow.gcp.store import FlowStore
from relayflow.local.polling import poll_until
from relayflow.local.stack import Stack

PROJECT = "relayflow-local"


@pytest.fixture
def store(bench_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> FlowStore:
    for name, value in bench_stack.env().items():
        monkeypatch.setenv(name, value)
    return FlowStore(firestore.Client(project=PROJECT))


def run_order(store: FlowStore, *, fail: bool) -> tuple[FlowRecord, FlowRecord]:
    flow_id = f"order-{uuid.uuid4().hex[:10]}"
    body = {"flow": "order", "flow_id": flow_id, "input": {"amount": 12, "fail": fail}}
    Events(build_publisher(), project=PROJECT).publish("flow-requests", body)

    def ended() -> bool:
        record = store.get(flow_id)
        return record is not None and record.status in TERMINAL

    assert poll_until(ended, timeout_s=60, interval_s=0.2), "the order never ended"
    parent = store.get(flow_id)
    child = store.get(f"{flow_id}-charge-g0a0")
    assert parent is not None and child is not None
    return parent, child


def test_a_parent_with_a_child_step_succeeds_with_the_child_s_output(store: FlowStore) -> None:
    parent, child = run_order(store, fail=False)
    assert parent.status is Status.SUCCEEDED, parent.result
    assert child.status is Status.SUCCEEDED
    assert parent.outputs["charge"] == {"captured": 12}
    assert parent.outputs["ship"] == {"shipped": True, "paid": 12}
    assert child.child_of is not None and child.child_of.flow_id == parent.flow_id
    assert child.child_of.step == "charge"


def test_a_child_that_fails_fails_its_parent(store: FlowStore) -> None:
    parent, child = run_order(store, fail=True)
    assert child.status is Status.FAILED
    assert parent.status is Status.FAILED
    assert parent.result is not None and parent.result.code == "CHILD_DECLINED"
    assert "ship" not in parent.outputs
