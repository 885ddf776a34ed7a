"""relayflow.core.bulk: a bulk action's pacing (batch sizes that divide a chunk, two seconds
at least between batches), its batch tasks' names, and its filter as stored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from relayflow.core.bulk import (
    CHUNK_ROWS,
    MAX_RATE_PER_S,
    MIN_PERIOD_S,
    BulkTask,
    batch_size,
    batches,
    checked_rate,
    chunk_of,
    filter_doc,
    filter_json,
    filter_of,
    is_bulk_id,
    period_s,
)
from relayflow.core.listing import FlowFilter
from relayflow.core.state import Status


@pytest.mark.parametrize(
    ("rate", "size"), [(0.01, 1), (0.5, 1), (1.0, 2), (3.0, 10), (5.0, 10), (20.0, 50), (50, 100)]
)
def test_a_batch_holds_two_seconds_of_flows_rounded_up_to_a_divisor_of_a_chunk(
    rate: float, size: int
) -> None:
    assert batch_size(rate) == size
    assert CHUNK_ROWS % size == 0
    # so its bulk document is written at most every MIN_PERIOD_S (half a write a second)
    assert period_s(rate, size) >= MIN_PERIOD_S


def test_the_rate_is_bounded_by_a_full_chunk_every_two_seconds() -> None:
    assert MAX_RATE_PER_S == CHUNK_ROWS / MIN_PERIOD_S == 50
    assert checked_rate(50) == 50
    for bad in (0.0, 50.5, float("nan"), -1):
        with pytest.raises(ValueError, match=r"rate_per_s must be 0.01..50 flows a second"):
            checked_rate(bad)


def test_a_batch_lies_in_one_chunk() -> None:
    assert batches(1000, 40) == 25 and batches(0, 10) == 0 and batches(1, 10) == 1
    assert chunk_of(0, 10) == (0, 0, 10)
    assert chunk_of(12, 10) == (1, 20, 30)
    assert chunk_of(3, 50) == (1, 50, 100)


def test_a_batch_task_is_named_by_bulk_round_batch_and_put_off_behind_a_hash() -> None:
    task = BulkTask(bulk_id="bulk-0123456789ab", batch=7, round=1, deferral=2)
    name = task.task_id()
    prefix, rest = name.split("-", 1)
    assert rest == "bulk-0123456789ab-r1-b7-d2" and len(prefix) == 8
    assert task.slot == (1, 7, 2)
    others = {
        BulkTask(bulk_id=task.bulk_id, batch=b, deferral=d).task_id()
        for b in range(3)
        for d in range(3)
    }
    assert len(others) == 9  # every batch and put-off a name of its own
    with pytest.raises(ValidationError):
        BulkTask(bulk_id="bulk-nothex", batch=0)
    assert is_bulk_id("bulk-0123456789ab") and not is_bulk_id("bulk-0123")


def test_a_filter_is_stored_with_every_field_that_narrows_it_and_read_back() -> None:
    wanted = FlowFilter(
        flow="registration",
        status=Status.FAILED,
        version=2,
        updated_from=datetime(2026, 3, 1, 12, tzinfo=UTC),
    )
    doc = filter_doc(wanted)
    assert doc == {
        "flow": "registration",
        "status": "FAILED",
        "version": 2,
        "updated_from": datetime(2026, 3, 1, 12, tzinfo=UTC),
    }
    assert filter_of(doc) == wanted
    assert filter_of({**doc, "colour": "red"}) == wanted  # a newer release's field: left out
    assert filter_json(wanted)["updated_from"] == "2026-03-01T12:00:00+00:00"


def test_pairs_are_stored_as_maps_and_read_back_as_pairs() -> None:
    # A filter field of pairs (a flow's labels): Firestore arrays may not hold arrays.
    from relayflow.core.bulk import _loaded, _stored

    pairs = (("team", "payments"), ("region", "eu"))
    stored = _stored(pairs)
    assert stored == [{"pair": ["team", "payments"]}, {"pair": ["region", "eu"]}]
    assert _loaded("labels", stored) == pairs
    assert _loaded("anything", ["a", "b"]) == ("a", "b")
