"""records: the flow document survives a Firestore round trip and bounds its history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord, HistoryEntry, NextTask, Result, Track
from relayflow.core.state import Status

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _record(**changes: object) -> FlowRecord:
    position = Position(step_index=1, step="await_ready", kind=TaskKind.POLL, poll=2)
    nxt = NextTask(queue="flow-polls", task_id="abc", run_at=NOW, position=position)
    record = FlowRecord(
        flow_id="acme-1",
        flow="demo",
        input={"resource": "acme-1"},
        status=Status.RUNNING,
        position=position,
        tracks={"await_ready": Track(position=position, next=nxt, started_at=NOW)},
        outputs={"reserve": {"id": "r-1"}},
        next_run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
    )
    return record.model_copy(update=changes)


def _entry(poll: int) -> HistoryEntry:
    return HistoryEntry(
        at=NOW + timedelta(seconds=poll), step="await_ready", kind=TaskKind.POLL, poll=poll,
        outcome="not ready",
    )  # fmt: skip


def test_a_record_round_trips_through_its_document() -> None:
    result = Result(status=Status.SUCCEEDED, code="OK", message="done", data={"x": 1})
    record = _record(history=[_entry(0)], result=result)
    assert FlowRecord.from_doc(record.to_doc()) == record


def test_a_document_keeps_datetimes_as_datetimes() -> None:
    doc = _record().to_doc()
    assert doc["created_at"] == NOW
    assert doc["next_run_at"] == NOW
    assert doc["status"] == "RUNNING"


def test_unknown_document_fields_are_ignored() -> None:
    doc = {**_record().to_doc(), "added_by_a_newer_version": True}
    assert FlowRecord.from_doc(doc) == _record()


def test_a_single_track_is_in_focus_when_read() -> None:
    record = FlowRecord.from_doc(_record().to_doc())
    assert record.focus == "await_ready"
    assert record.next is not None and record.next.task_id == "abc"
    assert record.step_started_at == NOW


def test_what_changes_in_focus_is_stored_in_its_track() -> None:
    record = _record()
    moved = record.model_copy(update={"poll_errors": 3, "next": None})
    doc = moved.to_doc()
    assert doc["tracks"]["await_ready"]["poll_errors"] == 3
    assert doc["next_run_at"] is None  # the earliest task of the tracks: none now
    assert "next" not in doc and "claim" not in doc  # the focus is never stored itself
