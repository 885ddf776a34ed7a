"""The orders flow through relayflow.testing: the real planner and engine, in memory, with
time that skips ahead. Each test runs in milliseconds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest
from orders.api import OrdersApi
from orders.flows import LABEL_POLL, orders_flow
from orders_fakes import FakeOrdersApi, slow_down

from relayflow import PermanentError
from relayflow.testing import Harness

ORDER = {
    "order_id": "o-1",
    "sku": "sku-1",
    "quantity": 2,
    "amount_cents": 1250,
    "address": "1 Main St",
}


@pytest.fixture
def api() -> FakeOrdersApi:
    return FakeOrdersApi(label_ready_after_polls=3)


@pytest.fixture
def h(api: FakeOrdersApi) -> Harness:
    return Harness(orders_flow(cast(OrdersApi, api)))


def live(api: FakeOrdersApi) -> dict[str, int]:
    return {kind: len(ids) for kind, ids in api.live.items() if ids}


def test_an_order_ships_after_its_label_polls_four_times(h: Harness, api: FakeOrdersApi) -> None:
    flow_id = h.start("orders", ORDER)
    record = h.run(flow_id)
    assert record is not None and record.status == "SUCCEEDED"
    assert record.polls == 4  # three PENDING answers, then READY
    assert [c.poll for c in h.calls_of("await_label")] == [0, 1, 2, 3]
    assert live(api) == {"reservation": 1, "charge": 1, "label": 1, "notification": 1}
    assert h.results(flow_id)[0]["data"] == {"notification_id": "notification-4"}


def test_a_429_waits_as_long_as_retry_after_says(h: Harness, api: FakeOrdersApi) -> None:
    api.fail("charge", slow_down(30), slow_down(45))
    flow_id = h.start("orders", ORDER)
    record = h.run(flow_id)
    assert record is not None and record.status == "SUCCEEDED"
    charges = [e for e in record.history if e.step == "charge_payment"]
    assert [e.outcome for e in charges] == ["retryable error", "retryable error", "succeeded"]
    assert [e.delay_s for e in charges[:2]] == [30.0, 45.0]
    assert charges[2].at - charges[0].at >= timedelta(seconds=75)
    assert live(api)["charge"] == 1  # three tries, one charge: they share a key


def test_a_label_never_ready_times_out_at_the_deadline_and_undoes_everything(
    h: Harness, api: FakeOrdersApi
) -> None:
    api.label_ready_after_polls = 10**9
    flow_id = h.start("orders", ORDER)
    started = h.now
    record = h.run(flow_id)
    assert record is not None and record.status == "TIMED_OUT"
    assert record.result is not None and record.result.code == "DEADLINE_EXCEEDED"
    last_poll = [e for e in record.history if e.kind == "poll"][-1]
    assert last_poll.detail.startswith("not ready by the deadline")
    # the last wait was cut short to land on the deadline: the last poll is exactly on it
    assert last_poll.at - started == timedelta(seconds=LABEL_POLL.deadline_s)
    undone = [e.step for e in record.history if e.outcome == "compensated"]
    assert undone == ["request_label", "charge_payment", "reserve_stock"]  # newest first
    assert live(api) == {}


def test_a_declined_card_releases_the_stock_and_charges_nothing(
    h: Harness, api: FakeOrdersApi
) -> None:
    api.fail("charge", PermanentError("402 CARD_DECLINED", code="CARD_DECLINED"))
    flow_id = h.start("orders", ORDER)
    record = h.run(flow_id)
    assert record is not None and record.status == "FAILED"
    assert record.result is not None and record.result.code == "CARD_DECLINED"
    assert [c.step for c in h.calls if c.kind == "compensate"] == ["reserve_stock"]
    assert live(api) == {}


def test_cancel_while_waiting_for_the_label_undoes_what_was_done(
    h: Harness, api: FakeOrdersApi
) -> None:
    api.label_ready_after_polls = 10**9
    flow_id = h.start("orders", ORDER)
    h.run_until(h.now + timedelta(minutes=5))
    assert h.flow(flow_id).position.step == "await_label"
    h.cancel(flow_id, "customer changed their mind")
    record = h.run(flow_id)
    assert record is not None and record.status == "CANCELLED"
    assert live(api) == {}
    assert h.results(flow_id)[0]["status"] == "CANCELLED"


def test_every_task_delivered_twice_changes_nothing(api: FakeOrdersApi) -> None:
    h = Harness(orders_flow(cast(OrdersApi, api)), duplicate_deliveries=True)
    flow_id = h.start("orders", ORDER)
    record = h.run(flow_id)
    assert record is not None and record.status == "SUCCEEDED"
    forward = [c.step for c in h.calls if c.kind == "action"]
    assert forward == ["reserve_stock", "charge_payment", "request_label", "notify"]
    assert len(h.results(flow_id)) == 1


def test_a_bad_order_is_rejected_at_the_start(h: Harness) -> None:
    bad: dict[str, Any] = {**ORDER, "quantity": 0}
    result = h.publish({"flow": "orders", "input": bad})
    assert result.reason is not None and "input.quantity" in result.reason
