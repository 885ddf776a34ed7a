"""What relayflow.Client checks and builds before it publishes (no Pub/Sub needed): the start
function's own reasons, the topic of each tenant, an id on every handle."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from relayflow.client import Client, InvalidMessage
from relayflow.core.flows import ActionStep, Flow, Registry, StepContext
from relayflow.core.messages import parse_start


class Order(BaseModel):
    order: int


def noop(ctx: StepContext) -> dict[str, int]:
    return {}


REGISTRY = Registry([Flow(name="orders", steps=(ActionStep("a", noop),), input_model=Order)])
ENV = {"RELAYFLOW_API_URL": "http://127.0.0.1:9", "GOOGLE_CLOUD_PROJECT": "relayflow-local"}


def client(**kwargs: object) -> Client:
    return Client(environ=ENV, registry=REGISTRY, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("flow", "payload", "extra"),
    [
        ("orders", {"order": "x"}, {}),
        ("nope", {}, {}),
        ("orders", {"order": 1}, {"flow_id": "has space"}),
        ("orders", {"order": 1}, {"flow_id": "__r__"}),
        ("orders", {"order": 1}, {"tenant": "UPPER"}),
        ("orders", {"order": 1}, {"priority": "urgent"}),
        ("orders", {"order": 1}, {"deadline_s": -1}),
        ("orders", {"deep": "x" * 70_000}, {}),
        ("orders", {"order": 1}, {"labels": {"Order": "1"}}),
        ("orders", {"order": 1}, {"labels": {f"k{i}": "v" for i in range(17)}}),
    ],
)
def test_a_bad_start_fails_with_the_start_functions_reason(
    flow: str, payload: dict[str, object], extra: dict[str, object]
) -> None:
    body = {"flow": flow, "input": payload, "flow_id": "f-1", **extra}
    with pytest.raises(InvalidMessage) as recorded:
        parse_start(json.dumps(body).encode(), REGISTRY)
    with pytest.raises(InvalidMessage) as raised:
        client()._prepare_body(body)
    assert raised.value.reason == recorded.value.reason


def test_each_tenant_starts_on_its_own_topic_and_every_handle_has_an_id() -> None:
    c = client()
    handle, topic, data = c._prepare_one("orders", {"order": 1})
    assert (topic, handle.tenant, len(handle.flow_id)) == ("flow-requests", "default", 32)
    assert json.loads(data)["flow_id"] == handle.flow_id
    handle, topic, _ = c._prepare_one("orders", {"order": 1}, tenant="acme", flow_id="o-1")
    assert (topic, handle.key) == ("flow-requests.acme", ("acme", "o-1"))
    assert client(tenant="acme")._prepare_one("orders", {"order": 1})[1] == "flow-requests.acme"


def test_bad_client_settings_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="tenant"):
        client(tenant="Not Valid")
    with pytest.raises(ValueError, match="wait"):
        client(wait="poll")
    with pytest.raises(ValueError, match="exactly one"):
        client().complete_callback("t", output={}, error={})


def test_a_starts_labels_go_in_its_start_message_and_a_list_asks_by_label() -> None:
    c = client()
    _, _, data = c._prepare_one("orders", {"order": 1}, labels={"order_id": "ORD-1"})
    assert json.loads(data)["labels"] == {"order_id": "ORD-1"}
    assert "labels" not in json.loads(c._prepare_one("orders", {"order": 1})[2])
    asked: list[tuple[str, dict[str, object]]] = []
    c.api.get = lambda path, query=None, **_: asked.append((path, query or {})) or {"flows": []}  # type: ignore[method-assign]
    c.list(label={"order_id": "ORD-1", "region": "eu"}, code="DECLINED", dependency="payments")
    c.list(label="order_id=ORD-1")
    assert [q["label"] for _, q in asked] == [["order_id=ORD-1", "region=eu"], ["order_id=ORD-1"]]
    assert (asked[0][1]["code"], asked[0][1]["dependency"]) == ("DECLINED", "payments")
