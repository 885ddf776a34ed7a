"""relayflow.core.labels: the labels a start message may carry, checked where the start
message is (``validate_start``) with a reason naming the label, and ``key=value`` filters."""

from __future__ import annotations

from typing import Any

import pytest

from relayflow.core import labels
from relayflow.core.errors import InvalidMessage, PermanentError
from relayflow.core.flows import ActionStep, Flow, StepContext
from relayflow.core.listing import FlowFilter
from relayflow.core.messages import validate_start
from relayflow.testing import Harness

START = {"flow": "registration", "input": {"resource": "acme-1"}}
KEY, VALUE = "^[a-z][a-z0-9_-]{0,62}$", "^[A-Za-z0-9_.@:/+-]{1,63}$"


def refusal(body: dict[str, Any]) -> str:
    with pytest.raises(InvalidMessage) as info:
        validate_start(body, None)
    return info.value.reason


def test_a_start_may_carry_labels_and_keeps_them() -> None:
    wanted = {"order_id": "ORD-2026/123", "customer": "jane@example.com", "region": "eu-west1"}
    message, _ = validate_start({**START, "labels": wanted}, None)
    assert message.labels == wanted


def test_sixteen_labels_are_the_most_a_start_carries() -> None:
    sixteen = {f"k{i}": "v" for i in range(16)}
    assert validate_start({**START, "labels": sixteen}, None)[0].labels == sixteen
    reason = refusal({**START, "labels": {**sixteen, "k16": "v"}})
    assert reason == "labels: Dictionary should have at most 16 items after validation, not more"


@pytest.mark.parametrize(
    ("given", "mentions"),
    [
        ({"Order": "1"}, f"labels.Order.[key]: String should match pattern '{KEY}'"),
        ({"1order": "1"}, "labels.1order.[key]: String should match pattern"),
        ({"k" * 64: "1"}, "[key]: String should match pattern"),
        ({"order id": "1"}, "labels.order id.[key]: String should match pattern"),
        ({"order=id": "1"}, "labels.order=id.[key]: String should match pattern"),
        ({"order_id": ""}, f"labels.order_id: String should match pattern '{VALUE}'"),
        ({"order_id": "x" * 64}, "labels.order_id: String should match pattern"),
        ({"order_id": "a b"}, "labels.order_id: String should match pattern"),
        ({"order_id": "a,b"}, "labels.order_id: String should match pattern"),
        ({"order_id": "a=b"}, "labels.order_id: String should match pattern"),
        ({"order_id": 123}, "labels.order_id: Input should be a valid string"),
        ({"order_id": None}, "labels.order_id: Input should be a valid string"),
        (["order_id=123"], "labels: Input should be a valid dictionary"),
        ("order_id=123", "labels: Input should be a valid dictionary"),
    ],
    ids=[
        "key-upper", "key-digit-first", "key-64", "key-space", "key-equals", "value-empty",
        "value-64", "value-space", "value-comma", "value-equals", "value-number", "value-null",
        "list", "string",
    ],
)  # fmt: skip
def test_a_label_that_breaks_the_bounds_is_refused_naming_it(given: Any, mentions: str) -> None:
    assert mentions in refusal({**START, "labels": given})


def test_filters_parse_as_key_value_and_refuse_what_no_flow_carries() -> None:
    assert labels.parse("order_id=ORD-1") == ("order_id", "ORD-1")
    assert labels.parse_all(["order_id=1", "region=eu"]) == {"order_id": "1", "region": "eu"}
    with pytest.raises(labels.InvalidLabel, match="must be key=value"):
        labels.parse("order_id")
    with pytest.raises(labels.InvalidLabel, match="label key 'Order' must match"):
        labels.parse("Order=1")
    with pytest.raises(labels.InvalidLabel, match="label order_id's value 'a b' must match"):
        labels.parse("order_id=a b")
    with pytest.raises(labels.InvalidLabel, match="label 'order_id' is given twice"):
        labels.parse_all(["order_id=1", "order_id=2"])
    with pytest.raises(labels.InvalidLabel, match="at most 16 labels, got 17"):
        labels.parse_all([f"k{i}=v" for i in range(17)])


def test_a_flows_labels_are_indexed_as_key_value_strings_in_key_order() -> None:
    assert labels.entries({"region": "eu", "order_id": "1"}) == ["order_id=1", "region=eu"]
    assert labels.shown({"region": "eu", "order_id": "1"}) == "order_id=1 region=eu"


def harness() -> Harness:
    def pay(ctx: StepContext) -> dict[str, Any]:
        if ctx.input.get("declined"):
            raise PermanentError("card declined", code="DECLINED")
        return {"paid": True}

    return Harness([Flow(name="orders", steps=(ActionStep("pay", pay),))])


def test_a_flows_labels_are_kept_across_a_retry_and_carried_on_its_result_events() -> None:
    h = harness()
    flow_id = h.start("orders", {"declined": True}, labels={"order_id": "ORD-123"})
    assert h.run(flow_id).labels == {"order_id": "ORD-123"}
    assert h.retry(flow_id).labels == {"order_id": "ORD-123"}  # generation 1, same labels
    h.run(flow_id)
    assert [(e["generation"], e["labels"]) for e in h.results(flow_id)] == [
        (0, {"order_id": "ORD-123"}),
        (1, {"order_id": "ORD-123"}),
    ]
    assert h.store.flows(FlowFilter(labels=(("order_id", "ORD-123"),))).items[0].flow_id == flow_id


def test_a_start_with_a_bad_label_is_recorded_in_rejected_with_its_reason() -> None:
    h = harness()
    result = h.publish({"flow": "orders", "input": {}, "labels": {"Order": "1"}})
    assert result.reason is not None and "labels.Order.[key]" in result.reason
    (rejected,) = h.store.rejected_messages().items
    assert rejected.reason == result.reason
    assert h.store.flows(FlowFilter()).items == []


def test_a_flow_id_reused_with_other_labels_is_a_conflict_not_a_duplicate() -> None:
    h = harness()
    h.start("orders", {}, flow_id="o-1", labels={"order_id": "1"})
    again = h.publish(
        {"flow": "orders", "input": {}, "flow_id": "o-1", "labels": {"order_id": "1"}}
    )
    assert again.reason is None  # the same start again
    other = h.publish(
        {"flow": "orders", "input": {}, "flow_id": "o-1", "labels": {"order_id": "2"}}
    )
    assert other.reason is not None and "different input or labels" in other.reason
