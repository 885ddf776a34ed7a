"""relayflow.core.bulk_state: a bulk action's document and its rows (one per flow: what the
dry run saw and said, then what was done), bounded however many flows it takes."""

from __future__ import annotations

from datetime import UTC, datetime

from relayflow.core.bulk import BulkKind
from relayflow.core.bulk_state import (
    MAX_NAMES,
    MAX_REASONS,
    OTHER,
    BulkAction,
    BulkRow,
    BulkState,
    Outcome,
    counted,
)
from relayflow.core.planner import Preview
from relayflow.core.state import Status
from tests.integration.support import make_record

AT = datetime(2026, 12, 4, tzinfo=UTC)


def test_a_row_keeps_what_the_dry_run_saw_and_said_with_long_lists_cut_short() -> None:
    record = make_record("f-1", status=Status.FAILED)
    steps = tuple(f"s{i}" for i in range(MAX_NAMES + 5))
    preview = Preview("f-1", "retry", True, rerun=steps, detail={"dependencies": ["client-api"]})
    row = BulkRow.of(record, preview)
    assert (row.flow_id, row.status, row.generation, row.allowed) == ("f-1", Status.FAILED, 0, True)
    assert len(row.rerun) == MAX_NAMES + 1 and row.rerun[-1] == "... and 5 more"
    assert row.dependencies == ["client-api"]
    done = row.ended(Outcome.SKIPPED, "x" * 1000, AT)
    assert done.outcome is Outcome.SKIPPED and len(done.note) == 300 and done.at == AT
    assert BulkRow.model_validate(done.to_json()) == done


def test_reasons_are_counted_at_most_a_score_of_them_the_rest_together() -> None:
    found: dict[str, int] = {}
    for i in range(MAX_REASONS + 10):
        found = counted(found, f"reason {i}")
    found = counted(found, "reason 0")
    assert len(found) == MAX_REASONS and found["reason 0"] == 2
    assert found[OTHER] == 11


def test_a_bulk_document_reads_back_as_written_and_logs_each_change_bounded() -> None:
    action = BulkAction(
        id="bulk-0123456789ab",
        action=BulkKind.CANCEL,
        filter={"status": "RUNNING"},
        reason="bad batch",
        by="ana",
        rate_per_s=5.0,
        batch_size=10,
        created_at=AT,
        updated_at=AT,
        matched=25,
    )
    assert action.batches == 3 and action.task().slot == (0, 0, 0)
    for i in range(40):
        action = action.logged(AT, f"change {i}", by="ana")
    assert len(action.log) == 30 and action.log[-1].what == "change 39"
    back = BulkAction.from_doc(action.to_doc(), version="v1")
    assert back == action.model_copy(update={"version": "v1"}) and back.version == "v1"
    assert "version" not in action.to_doc()
    assert BulkState.DONE.over and not BulkState.PAUSED.over
