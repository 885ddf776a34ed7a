"""The console's signal buttons rendered in process: a flow waiting at a signal step shows
what it waits for and one button per signal (for callers who may signal); each asks why
(required) and records the caller and the reason in the flow's history. (tests/console clicks
the same button in a real browser against the local stack.)"""

from __future__ import annotations

import pytest

from relayflow.cli import render
from relayflow.core.state import Status
from relayflow.web import timeline
from relayflow.web.access import Access

from .test_api import Api
from .test_signals_api import APPROVAL, build_approval, waiting

SAME_SITE = {"Origin": "http://127.0.0.1:8129"}


@pytest.fixture
def console() -> Api:
    return build_approval(Access(verifier=None))


def text(response: object) -> str:
    return response.get_data(as_text=True)  # type: ignore[attr-defined,no-any-return]


def test_a_waiting_flow_shows_what_it_waits_for_and_a_button_per_signal(console: Api) -> None:
    waiting(console, "o-1")
    page = text(console.client.get("/console/flows/o-1"))
    assert "approval: waiting for signal approve or reject" in page
    assert 'id="signal-approve"' in page and 'id="signal-reject"' in page


def test_a_flow_not_waiting_for_a_signal_has_no_signal_buttons(console: Api) -> None:
    console.harness.start("approval", flow_id="o-1")  # its first step has not run yet
    page = text(console.client.get("/console/flows/o-1"))
    assert 'id="signal-approve"' not in page


def test_approve_asks_why_then_records_who_and_why(console: Api) -> None:
    waiting(console, "o-1")
    confirm = text(console.client.get("/console/flows/o-1/signals/approve"))
    assert "Approve o-1?" in confirm and 'name="reason"' in confirm

    no_reason = console.client.post(
        "/console/flows/o-1/signals/approve", data={}, headers=SAME_SITE
    )
    assert no_reason.status_code == 400 and "reason is required" in text(no_reason)
    assert console.harness.flow("o-1").status is Status.RUNNING

    done = console.client.post(
        "/console/flows/o-1/signals/approve", data={"reason": "budget ok"}, headers=SAME_SITE
    )
    assert done.status_code == 303
    assert done.headers["Location"].endswith("/console/flows/o-1?notice=signalled")
    record = console.harness.run("o-1")
    assert record is not None and record.status is Status.SUCCEEDED
    assert [(e.outcome, e.by, e.detail) for e in record.history if e.by] == [
        ("signal approve", "local", "budget ok")
    ]
    shown = text(console.client.get("/console/flows/o-1"))
    assert "budget ok" in shown and "signal approve" in shown


def test_a_signal_nothing_takes_is_an_error_page_saying_why(console: Api) -> None:
    waiting(console, "o-1")
    console.client.post(
        "/console/flows/o-1/signals/approve", data={"reason": "ok"}, headers=SAME_SITE
    )
    console.harness.run("o-1")
    late = console.client.post(
        "/console/flows/o-1/signals/reject", data={"reason": "too late"}, headers=SAME_SITE
    )
    assert late.status_code == 409 and "the flow has ended" in text(late)


def test_status_and_the_api_say_what_the_flow_waits_for(console: Api) -> None:
    waiting(console, "o-1")
    doc = console.client.get("/flows/o-1").get_json()
    track = doc["tracks"]["approval"]
    assert track["waiting_for"] == ["approve", "reject"]
    assert track["signal_until"] is not None
    shown = render.flow(doc)
    assert "waiting for signal approve or reject until" in shown
    assert "position  approval signal wait 1" in shown


def test_the_timeline_draws_the_wait_and_puts_the_signal_on_the_operators_lane(
    console: Api,
) -> None:
    waiting(console, "o-1")
    console.harness.signal("o-1", "approve", by="alice", reason="ok")
    record = console.harness.run("o-1")
    assert record is not None
    drawn = timeline.build(record, APPROVAL, now=console.harness.now)
    tones = {(m.entry.outcome, m.tone) for m in drawn.marks}
    assert ("waiting for signal approve or reject", "wait") in tones
    assert ("signal approve", "op") in tones
