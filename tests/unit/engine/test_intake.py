"""engine against in-memory ports: starting flows from messages (idempotent starts, rejected
messages recorded)."""

from __future__ import annotations

import base64
import re

import pytest

from relayflow.core.engine import Started
from relayflow.core.ports import Enqueued
from relayflow.core.position import FLOW_ID_PATTERN
from relayflow.core.state import Status

from .support import NOW, START, Harness, encode


def test_start_creates_one_pending_flow_and_ensures_its_first_task(h: Harness) -> None:
    result = h.start()
    assert (result.outcome, result.flow_id) == (Started.STARTED, "1001")
    record = h.record()
    assert record.status is Status.PENDING
    assert (record.flow, record.input, record.message_id) == ("demo", START["input"], "1001")
    assert list(h.store.docs) == ["1001"]
    task = h.queue.only()
    assert task.next == record.next
    assert (task.next.queue, task.next.run_at) == ("q-steps", NOW)
    assert [outcome for _, _, outcome in h.queue.ensured] == [Enqueued.CREATED]
    assert h.events.published == []


def test_start_uses_the_flow_id_from_the_message_when_given(h: Harness) -> None:
    result = h.start({**START, "flow_id": "order-42"})
    assert result.flow_id == "order-42"
    assert h.queue.only().flow_id == "order-42"


def test_a_message_id_that_cannot_be_a_flow_id_is_turned_into_one(h: Harness) -> None:
    result = h.start(message_id="projects/p/messages/7:1")
    assert result.flow_id is not None
    assert re.match(FLOW_ID_PATTERN, result.flow_id)
    assert h.start(message_id="projects/p/messages/7:1").flow_id == result.flow_id


def test_the_same_message_twice_is_one_flow_and_its_first_task_re_ensured(h: Harness) -> None:
    first = h.start()
    second = h.start()
    assert first.outcome is Started.STARTED
    assert (second.outcome, second.flow_id) == (Started.DUPLICATE, "1001")
    assert list(h.store.docs) == ["1001"]
    (_, a, created), (_, b, again) = h.queue.ensured
    assert a == b
    assert (created, again) == (Enqueued.CREATED, Enqueued.ALREADY_ENQUEUED)
    assert len(h.queue.tasks) == 1


def test_a_duplicate_start_after_progress_does_not_rewind_the_flow(h: Harness) -> None:
    h.start()
    h.deliver()
    before = h.store.docs["1001"]
    assert h.start().outcome is Started.DUPLICATE
    assert h.store.docs["1001"] == before
    assert len(h.reserve.calls) == 1


def test_a_reused_flow_id_with_a_different_input_is_rejected_not_dropped(h: Harness) -> None:
    h.start({**START, "flow_id": "order-42"})
    other = {**START, "flow_id": "order-42", "input": {"resource": "other-9"}}
    result = h.start(other, message_id="1002")
    assert result.outcome is Started.REJECTED
    assert result.reason is not None and "already names a 'demo' flow" in result.reason
    assert h.record("order-42").input == START["input"]
    assert h.store.rejected["1002"]["reason"] == result.reason


@pytest.mark.parametrize(
    ("data", "mentions"),
    [
        (b"not json", "not JSON"),
        (encode({"flow": "payment", "input": {}}), "unknown flow 'payment' (registered: demo)"),
        (encode({**START, "deadline_s": -1}), "deadline_s"),
    ],
)
def test_a_malformed_message_is_rejected_and_recorded_without_a_flow(
    h: Harness, data: bytes, mentions: str
) -> None:
    result = h.start(data, message_id="2002")
    assert result.outcome is Started.REJECTED
    assert result.reason is not None and mentions in result.reason
    assert h.store.docs == {}
    assert h.queue.tasks == {} and h.events.published == []
    (record,) = h.store.rejected.values()
    assert record["message_id"] == "2002"
    assert record["reason"] == result.reason
    assert base64.b64decode(record["data_base64"]) == data
    assert record["data_truncated"] is False
    assert record["attributes"] == [{"key": "origin", "value": "test"}]
    assert record["rejected_at"] == NOW
