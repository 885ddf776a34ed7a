"""Events against the Pub/Sub emulator: the result event, read back from a subscription."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from google.pubsub_v1 import SubscriberClient

from relayflow.core.records import Result
from relayflow.core.state import Status
from relayflow.gcp.events import Events

from .support import make_record, pull

FINISHED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_success_is_published_with_its_data(
    publisher: Events, subscriber: SubscriberClient, results_subscription: str
) -> None:
    result = Result(
        status=Status.SUCCEEDED, code="OK", message="flow completed", data={"first": {"id": 7}}
    )
    record = make_record("flow-ok", status=Status.SUCCEEDED, result=result, finished_at=FINISHED)

    message_id = publisher.publish_result(record)

    [received] = pull(subscriber, results_subscription, count=1)
    assert received.message.message_id == message_id
    assert dict(received.message.attributes) == {
        "flow_id": "flow-ok",
        "flow": "it-flow",
        "tenant": "default",
        "status": "SUCCEEDED",
        "generation": "0",
        "event": "result",
    }
    assert json.loads(received.message.data) == {
        "flow_id": "flow-ok",
        "flow": "it-flow",
        "version": 1,
        "tenant": "default",
        "labels": {},
        "generation": 0,
        "status": "SUCCEEDED",
        "code": "OK",
        "message": "flow completed",
        "data": {"first": {"id": 7}},
        "error": None,
        "event": "result",
        "cleanup": None,
        "created_at": record.model_dump(mode="json")["created_at"],
        "finished_at": "2026-03-01T12:00:00Z",
        "polls": 0,
        "attempts": 0,
    }


def test_a_failure_is_published_with_its_error(
    publisher: Events, subscriber: SubscriberClient, results_subscription: str
) -> None:
    error = {"code": "REJECTED", "message": "the client said no", "step": "first", "attempt": 0}
    result = Result(
        status=Status.FAILED, code="REJECTED", message="the client said no", error=error
    )
    record = make_record("flow-bad", status=Status.FAILED, result=result, finished_at=FINISHED)

    publisher.publish_result(record)

    [received] = pull(subscriber, results_subscription, count=1)
    assert dict(received.message.attributes) == {
        "flow_id": "flow-bad",
        "flow": "it-flow",
        "tenant": "default",
        "status": "FAILED",
        "generation": "0",
        "event": "result",
    }
    assert json.loads(received.message.data) == {
        "flow_id": "flow-bad",
        "flow": "it-flow",
        "version": 1,
        "tenant": "default",
        "labels": {},
        "generation": 0,
        "status": "FAILED",
        "code": "REJECTED",
        "message": "the client said no",
        "data": None,
        "error": error,
        "event": "result",
        "cleanup": None,
        "created_at": record.model_dump(mode="json")["created_at"],
        "finished_at": "2026-03-01T12:00:00Z",
        "polls": 0,
        "attempts": 0,
    }


def test_each_publish_is_one_message(
    publisher: Events, subscriber: SubscriberClient, results_subscription: str
) -> None:
    result = Result(status=Status.TIMED_OUT, code="DEADLINE_EXCEEDED", message="too slow")
    ids = {
        publisher.publish_result(make_record(f"flow-{n}", status=Status.TIMED_OUT, result=result))
        for n in range(3)
    }

    received = pull(subscriber, results_subscription, count=3)

    assert {m.message.message_id for m in received} == ids
    assert sorted(m.message.attributes["flow_id"] for m in received) == [
        "flow-0",
        "flow-1",
        "flow-2",
    ]
    assert pull(subscriber, results_subscription, count=1, timeout_s=0.5) == []
