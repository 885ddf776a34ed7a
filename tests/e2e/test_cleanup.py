"""Undo until it is done, on the whole local stack (issue 18): while the client API loses
every response (each call takes effect and answers 500), a flow's register step fails and
its undo cannot be done either; the flow ends FAILED at once with its clean-up pending, and
once the API is back the clean-up undoes the registration — also when the worker running the
clean-up's undo is SIGKILLed mid-call."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

from relayflow.core.records import CleanupState, FlowRecord
from relayflow.core.state import Status
from relayflow.local import statefile
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness
from tests.e2e.test_cli import _run

pytestmark = pytest.mark.e2e

LOSE_EVERY_RESPONSE = [{"status": 500, "after_effect": True, "count": None}]


def _live(harness: Harness, resource: str) -> list[str]:
    live = harness.client_api("GET", "/stats?detail=1")["live"]
    return list(live["registrations_by_resource"].get(resource, []))


def _failed_with_cleanup_pending(harness: Harness, flow_id: str) -> FlowRecord:
    """Start a flow while the API loses every response; it ends FAILED with its clean-up
    pending, the API still down."""
    harness.client_api("POST", "/admin/faults", json=LOSE_EVERY_RESPONSE)
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    harness.publish(body)
    ended = harness.wait_terminal(flow_id, timeout_s=60)
    assert ended.status is Status.FAILED
    assert ended.result is not None and ended.result.code == "RETRIES_EXHAUSTED"
    assert ended.cleanup is not None and ended.cleanup.state is CleanupState.PENDING
    assert len(_live(harness, flow_id)) == 1  # the registration happened; its answer was lost
    return ended


def _cleanup_over(harness: Harness, flow_id: str, timeout_s: float) -> FlowRecord:
    found: list[FlowRecord] = []

    def over() -> bool:
        record = harness.store.get(flow_id)
        if record is not None and record.cleanup is not None and not record.cleaning:
            found.append(record)
            return True
        return False

    assert poll_until(over, timeout_s=timeout_s, interval_s=0.2), f"{flow_id} still cleaning"
    return found[0]


def test_a_flow_ends_at_once_during_an_outage_and_its_clean_up_finishes_after_it(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("cleanup")
    _failed_with_cleanup_pending(harness, flow_id)

    shown = _run(harness, "status", flow_id)
    assert shown.returncode == 0, shown.stderr
    assert "cleanup   pending: undoing what it left" in shown.stdout

    harness.client_api("DELETE", "/admin/faults")  # the API is back

    cleaned = _cleanup_over(harness, flow_id, timeout_s=60)
    assert cleaned.cleanup is not None and cleaned.cleanup.state is CleanupState.DONE
    assert cleaned.status is Status.FAILED
    assert _live(harness, flow_id) == []
    shown = _run(harness, "status", flow_id)
    assert "cleanup   done at" in shown.stdout, shown.stdout
    again = _run(harness, "undo", flow_id, "--reason", "to be sure")
    assert again.returncode != 0 and "nothing is left to undo" in again.stderr


def test_the_clean_up_finishes_when_the_worker_is_killed_during_its_undo(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("cleanup-kill")
    _failed_with_cleanup_pending(harness, flow_id)
    # the API comes back, but slowly for the undo: the worker is mid-call when it dies
    harness.client_api("DELETE", "/admin/faults")
    slow = [{"method": "DELETE", "path_prefix": "/registrations", "delay_s": 6, "count": 1}]
    harness.client_api("POST", "/admin/faults", json=slow)

    def undoing() -> bool:
        record = harness.store.get(flow_id)
        track = record.tracks.get("~cleanup") if record is not None else None
        return track is not None and track.claim is not None

    assert poll_until(undoing, timeout_s=90, interval_s=0.1)  # a breaker may put it off
    state = statefile.load(harness.stack.state_file)
    assert state is not None
    worker = next(p.pid for p in state.processes if p.name == "worker")
    os.killpg(worker, signal.SIGKILL)
    harness.stack.up()  # heals what died, as `relayflow local up` does

    cleaned = _cleanup_over(harness, flow_id, timeout_s=90)
    assert cleaned.cleanup is not None and cleaned.cleanup.state is CleanupState.DONE
    assert _live(harness, flow_id) == []
