"""relayflow.core.result_events: what an ended flow announces on ``flow-results`` — its result
(``event: result``), and once a clean-up it ended with is over, the same again
(``event: cleanup``) — with attributes a subscriber filters and dedupes on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayflow.core.position import Position, TaskKind
from relayflow.core.records import Cleanup, CleanupState, FlowRecord, Result
from relayflow.core.result_events import event_kind, result_attributes, result_event
from relayflow.core.state import Status

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FAILED = Result(status=Status.FAILED, code="DECLINED", message="declined", error={"step": "pay"})


def ended(cleanup: CleanupState | None = None) -> FlowRecord:
    position = Position(generation=2, step_index=1, step="pay", kind=TaskKind.ACTION)
    record = FlowRecord(
        flow_id="order-7",
        flow="orders",
        version=3,
        tenant="acme",
        labels={"order_id": "ORD-7"},
        input={},
        status=Status.FAILED,
        position=position,
        result=FAILED,
        created_at=NOW,
        updated_at=NOW,
    )
    if cleanup is None:
        return record
    window = Cleanup(state=cleanup, since=NOW, until=NOW + timedelta(hours=1), left=["charge"])
    return record.model_copy(update={"cleanup": window})


def test_a_flow_that_ended_with_nothing_left_to_undo_announces_its_result() -> None:
    record = ended()
    assert event_kind(record) == "result"
    assert result_event(record) == {
        "flow_id": "order-7",
        "flow": "orders",
        "version": 3,
        "tenant": "acme",
        "labels": {"order_id": "ORD-7"},  # what the flow was started with, kept for good
        "generation": 2,
        "status": "FAILED",
        "code": "DECLINED",
        "message": "declined",
        "data": None,
        "error": {"step": "pay"},
        "event": "result",
        "cleanup": None,
        "created_at": "2026-03-01T12:00:00Z",
        "finished_at": None,
        "polls": 0,
        "attempts": 0,
    }
    assert result_attributes(record) == {
        "flow_id": "order-7",
        "flow": "orders",
        "tenant": "acme",
        "status": "FAILED",
        "generation": "2",
        "event": "result",
    }


def test_a_flow_whose_clean_up_is_pending_announces_its_result_naming_the_clean_up() -> None:
    record = ended(CleanupState.PENDING)
    assert event_kind(record) == "result"
    event = result_event(record)
    assert event["event"] == "result"
    assert event["cleanup"]["state"] == "pending" and event["cleanup"]["left"] == ["charge"]
    assert result_attributes(record)["cleanup"] == "pending"


def test_once_its_clean_up_is_over_the_flow_announces_it_as_a_second_event() -> None:
    for state in (CleanupState.DONE, CleanupState.ABANDONED):
        record = ended(state)
        assert event_kind(record) == "cleanup"
        assert result_event(record)["event"] == "cleanup"
        attributes = result_attributes(record)
        assert (attributes["event"], attributes["cleanup"]) == ("cleanup", str(state))
        # the same flow, generation and result: a subscriber tells them apart by ``event``
        assert result_event(record)["code"] == "DECLINED"


def test_an_event_carries_when_the_flow_was_created_and_ended_and_its_tries() -> None:
    # What analytics reads (docs/analytics.md): run time, and the tries its cost follows.
    record = ended().model_copy(
        update={"finished_at": NOW + timedelta(seconds=42), "polls": 5, "attempts": 3}
    )
    event = result_event(record)
    assert (event["created_at"], event["finished_at"]) == (
        "2026-03-01T12:00:00Z",
        "2026-03-01T12:00:42Z",
    )
    assert (event["polls"], event["attempts"]) == (5, 3)
