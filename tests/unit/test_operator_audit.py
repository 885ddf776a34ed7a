"""Operator actions are recorded on the flow's history with who did them and why."""

from __future__ import annotations

from typing import Any

from relayflow.core.errors import NotReady, PermanentError
from relayflow.core.flows import ActionStep, Flow, PollPolicy, PollStep, StepContext
from relayflow.core.records import HistoryEntry
from relayflow.core.state import Status
from relayflow.testing import Harness

FLOW = Flow(
    name="demo",
    steps=(
        ActionStep("reserve", lambda ctx: {"id": "r-1"}, compensate=lambda ctx: {}),
        PollStep("await_ready", lambda ctx: {}, policy=PollPolicy(initial_s=1, max_polls=50)),
    ),
)


def never_ready(ctx: StepContext) -> dict[str, Any]:
    raise NotReady("still pending")


def operator_entries(history: list[HistoryEntry]) -> list[tuple[str, str, str]]:
    return [(e.outcome, e.by, e.detail) for e in history if e.by]


def test_a_cancel_records_the_operator_and_the_reason() -> None:
    # given a flow waiting on a poll
    h = Harness(FLOW)
    h.script("await_ready", never_ready)
    flow_id = h.start("demo")
    h.deliver_next(flow_id)
    h.deliver_next(flow_id)

    # when an operator cancels it, saying why
    h.engine.cancel(flow_id, "customer withdrew the order", by="ana@example.com")
    record = h.run(flow_id)

    # then the flow is undone and cancelled, and its history names who and why
    assert record is not None and record.status is Status.CANCELLED
    assert record.result is not None and record.result.message == "customer withdrew the order"
    assert operator_entries(record.history) == [
        ("cancelled", "ana@example.com", "customer withdrew the order")
    ]


def test_a_retry_records_the_operator_and_the_reason_with_the_new_generation() -> None:
    # given a flow that failed at its first step
    h = Harness(FLOW)
    h.script("reserve", PermanentError("out of stock"), {"id": "r-2"})
    flow_id = h.start("demo")
    assert h.run(flow_id).status is Status.FAILED  # type: ignore[union-attr]

    # when an operator retries it
    retried = h.engine.retry(flow_id, reason="stock arrived", by="bo@example.com")

    # then the restart entry says who, why, and which generation began
    assert retried.position.generation == 1
    assert operator_entries(retried.history) == [
        ("restarted", "bo@example.com", "generation 1: stock arrived")
    ]
    assert h.run(flow_id).status is Status.SUCCEEDED  # type: ignore[union-attr]


def test_entries_not_made_by_an_operator_name_nobody() -> None:
    h = Harness(FLOW)
    record = h.run(h.start("demo"))
    assert record is not None and record.history
    assert {e.by for e in record.history} == {""}


def test_a_document_written_before_the_field_existed_still_parses() -> None:
    entry = HistoryEntry.model_validate(
        {"at": "2026-01-01T00:00:00Z", "step": "s", "kind": "action", "outcome": "succeeded"}
    )
    assert entry.by == ""
