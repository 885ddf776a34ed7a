"""Signals on the local stack: the reference app's ``approval`` flow waits at its
WaitForSignal step, holding one task (its timeout) and no worker, until a signal comes — sent
with the api, with the CLI, or as a message on ``flow-signals``; a resend under the same id is
a no-op, and a signal for an ended flow is answered 409. No test sleeps: each polls until done.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import requests

from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness
from tests.e2e.test_cli import _run

pytestmark = pytest.mark.e2e


def waiting(harness: Harness, flow_id: str) -> FlowRecord:
    """Start an approval flow and wait until its decision step waits for a signal."""
    harness.publish({"flow": "approval", "flow_id": flow_id, "input": {"order": flow_id}})
    found: list[FlowRecord] = []

    def waits() -> bool:
        record = harness.flow(flow_id)
        track = record.tracks.get("decision") if record is not None else None
        if record is not None and track is not None and track.waiting_for:
            found.append(record)
            return True
        return False

    assert poll_until(waits, timeout_s=30, interval_s=0.2), f"{flow_id} never waited"
    return found[0]


def test_a_signal_sent_with_the_api_approves_and_a_resend_is_a_no_op(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("sig-api")
    record = waiting(harness, flow_id)
    track = record.tracks["decision"]
    assert track.waiting_for == ["approve", "reject"]
    assert track.next is not None and track.next.position.kind == "signal"  # its one task
    shown = requests.get(harness.url(harness.ports.api, f"/flows/{flow_id}"), timeout=10).json()
    assert shown["tracks"]["decision"]["waiting_for"] == ["approve", "reject"]

    url = harness.url(harness.ports.api, f"/flows/{flow_id}/signals/approve")
    body = {"data": {"po": "PO-1"}, "reason": "budget ok", "signal_id": f"{flow_id}-1"}
    sent = requests.post(url, json=body, timeout=10)
    assert sent.status_code == 200, sent.text
    assert sent.json()["outcome"] == "delivered"

    ended = harness.wait_terminal(flow_id)
    assert ended.status is Status.SUCCEEDED
    assert ended.outputs["record"] == {"approved": True, "by": "local", "reason": "budget ok"}
    assert ended.outputs["decision"]["data"] == {"po": "PO-1"}
    # a resend under its id is a duplicate though the flow has ended; a new signal is refused
    resent = requests.post(url, json=body, timeout=10)
    assert resent.status_code == 200 and resent.json()["outcome"] == "duplicate", resent.text
    late = requests.post(url, json={**body, "signal_id": f"{flow_id}-2"}, timeout=10)
    assert late.status_code == 409 and late.json()["code"] == "FLOW_ENDED"


def test_a_signal_sent_with_the_cli_rejects(harness: Harness, new_id: Callable[[str], str]) -> None:
    flow_id = new_id("sig-cli")
    waiting(harness, flow_id)
    sent = _run(
        harness, "signal", flow_id, "reject", "--data", json.dumps({"why": "no stock"}),
        "--reason", "out of stock", "--id", f"{flow_id}-1",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert f"signal reject to {flow_id} delivered" in sent.stdout
    ended = harness.wait_terminal(flow_id)
    assert ended.outputs["record"]["approved"] is False
    assert ended.outputs["decision"]["data"] == {"why": "no stock"}
    shown = _run(harness, "status", flow_id)
    assert "signal reject" in shown.stdout and "by local" in shown.stdout

    unknown = _run(harness, "signal", flow_id, "approve", "--reason", "late")
    assert unknown.returncode != 0
    assert "the flow has ended" in unknown.stderr + unknown.stdout


def test_a_signal_message_on_flow_signals_approves_once_however_often_it_comes(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("sig-msg")
    waiting(harness, flow_id)
    message = {"flow_id": flow_id, "signal": "approve", "by": "erp", "signal_id": f"{flow_id}-m"}
    harness.publish(message, topic="flow-signals")
    harness.publish(message, topic="flow-signals")  # sent twice: the id makes it one signal
    ended = harness.wait_terminal(flow_id)
    assert ended.status is Status.SUCCEEDED
    assert ended.outputs["decision"]["by"] == "erp (via flow-signals)"
    taken = [e for e in ended.history if e.outcome == "signal approve"]
    assert len(taken) == 1
