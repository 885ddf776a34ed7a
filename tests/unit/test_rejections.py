"""What a refused task is recorded as: its document id, safe for Firestore, and its fields."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayflow.core.rejections import rejected_task, rejected_task_id


def test_our_task_names_keep_their_readable_ids() -> None:
    assert (
        rejected_task_id("1a2b3c4d-f-1-0reserve-a0-p0-g0r0")
        == "task-1a2b3c4d-f-1-0reserve-a0-p0-g0r0"
    )


def test_a_refused_task_keeps_its_name_body_and_reason_bounded_until_it_expires() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    doc_id, record = rejected_task("t" * 600, "no task", b"x" * 20000, now=now, retention_days=2)
    assert doc_id == rejected_task_id("t" * 600)
    assert record == {
        "kind": "task",
        "task": "t" * 500,
        "reason": "no task",
        "body": b"x" * 16384,
        "rejected_at": now,
        "expire_at": now + timedelta(days=2),
    }
