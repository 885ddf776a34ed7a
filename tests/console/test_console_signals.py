"""An approval clicked in the console, in a real browser against the local stack: a flow of
the reference app's ``approval`` flow waits at its signal step; its page says what it waits
for and offers Approve and Reject; Approve asks why, and the flow goes on to succeed, its
history naming who approved and why."""

from __future__ import annotations

import uuid

import pytest
from selenium.webdriver.common.by import By

from relayflow.core.state import Status
from relayflow.local.polling import poll_until

from .conftest import Console
from .test_console_browser import confirm_with_reason, status_shown

pytestmark = pytest.mark.e2e


def test_approve_from_the_page_with_a_reason_lets_the_flow_succeed(console: Console) -> None:
    # given an approval flow waiting for its decision
    flow_id = f"approve-{uuid.uuid4().hex[:8]}"
    console.h.publish({"flow": "approval", "flow_id": flow_id, "input": {"order": "o-1"}})

    def waits() -> bool:
        record = console.h.flow(flow_id)
        track = record.tracks.get("decision") if record is not None else None
        return track is not None and bool(track.waiting_for)

    assert poll_until(waits, timeout_s=30, interval_s=0.2)

    # when a person opens its page, sees what it waits for, and approves, saying why
    console.open(f"/console/flows/{flow_id}")
    waiting = console.text("waiting-decision")  # the page refreshes while the flow waits
    assert "waiting for signal approve or reject" in waiting
    assert console.read(lambda d: d.find_element(By.ID, "signal-reject").is_displayed())
    console.screenshot("console-approval.png")
    confirm_with_reason(console, "signal-approve", "budget approved by finance")

    # then the flow succeeds, and its history says who approved it and why
    console.wait(status_shown(flow_id, Status.SUCCEEDED))
    record = console.h.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED
    assert record.outputs["record"] == {
        "approved": True,
        "by": "local",
        "reason": "budget approved by finance",
    }
    assert [(e.outcome, e.by, e.detail) for e in record.history if e.by] == [
        ("signal approve", "local", "budget approved by finance")
    ]
    history = console.driver.find_element(By.ID, "history").text
    assert "signal approve" in history and "budget approved by finance" in history
