"""Parent and children linked both ways: ``GET /flows/{id}``'s ``family``, the list of a
parent's children (``GET /flows?parent=``, the console's flows page, ``relayflow list
--parent``), ``relayflow status``'s lines, and ``relayflow graph``'s label for a child step."""

from __future__ import annotations

from typing import Any

import pytest

from relayflow import ActionStep, ChildFlow, Flow, StepContext
from relayflow.cli import render
from relayflow.core.flows import ForEach, Registry
from relayflow.core.kinds import REGISTRY
from relayflow.core.listing import FlowFilter
from relayflow.core.metrics import Metrics
from relayflow.core.records import flow_key
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.guard import RequestGuard
from relayflow.web.operations import Counters, Operations
from relayflow.web.params import BadRequest, flow_filter

from .test_api import FakeDeadLetters


def ok(ctx: StepContext) -> dict[str, Any]:
    return {"ok": ctx.input.get("n", 0)}


PAYMENT = Flow(name="payment", steps=(ActionStep("capture", ok),))
ORDER = Flow(
    name="order",
    steps=(
        ChildFlow("charge", flow="payment", input=lambda ctx: {"n": 1}),
        ForEach(
            "each",
            items=lambda ctx: [1, 2, 3],
            steps=(ChildFlow("pay", flow="payment", input=lambda ctx: {"n": ctx.item}),),
        ),
    ),
)


@pytest.fixture
def ran() -> tuple[Harness, Any]:
    h = Harness((ORDER, PAYMENT))
    fid = h.start("order", {}, flow_id="o-1")
    h.run(fid)
    ops = Operations(
        engine=h.engine,
        store=h.store,
        access=Access(verifier=None),
        dead_letters=FakeDeadLetters(),
        counters=Counters(),
        metrics=Metrics(),
        registry=Registry((ORDER, PAYMENT)),
        guard=RequestGuard(),
    )
    return h, build_api(ops).test_client()


def test_a_parent_s_children_are_listed_by_its_id_and_none_else(ran: tuple[Harness, Any]) -> None:
    h, client = ran
    listed = h.store.summaries(FlowFilter(parent=flow_key("default", "o-1")))
    assert sorted(s.flow_id for s in listed.items) == [
        "o-1-charge-g0a0",
        "o-1-each-i0-pay-g0a0",
        "o-1-each-i1-pay-g0a0",
        "o-1-each-i2-pay-g0a0",
    ]
    page = client.get("/flows?parent=o-1").get_json()
    assert len(page["flows"]) == 4
    assert client.get("/flows?parent=o-2").get_json()["flows"] == []
    two = client.get("/flows?parent=o-1&limit=2").get_json()
    assert len(two["flows"]) == 2 and two["next_cursor"]  # paged, as any list


def test_the_flow_document_links_parent_and_children_both_ways(ran: tuple[Harness, Any]) -> None:
    _, client = ran
    child = client.get("/flows/o-1-charge-g0a0").get_json()
    assert child["family"]["parent"] == {
        "flow_id": "o-1",
        "step": "charge",
        "item": None,
        "url": "/flows/o-1",
    }
    item = client.get("/flows/o-1-each-i2-pay-g0a0").get_json()["family"]["parent"]
    assert (item["flow_id"], item["step"], item["item"]) == ("o-1", "pay", 2)
    parent = client.get("/flows/o-1").get_json()
    assert parent["family"]["parent"] is None
    assert parent["family"]["children"]["list"] == "/flows?parent=o-1"
    shown = render.flow(child)
    assert "parent    o-1 (step charge)" in shown
    assert "children  relayflow list --parent o-1" in render.flow(parent)


def test_the_console_links_parent_and_children(ran: tuple[Harness, Any]) -> None:
    _, client = ran
    page = client.get("/console/flows/o-1-charge-g0a0").get_data(as_text=True)
    assert 'id="parent-link" href="/console/flows/o-1"' in page
    parent = client.get("/console/flows/o-1").get_data(as_text=True)
    assert 'id="children-link" href="/console/flows?parent=o-1"' in parent
    listed = client.get("/console/flows?parent=o-1").get_data(as_text=True)
    assert "o-1-charge-g0a0" in listed and "o-1-each-i0-pay-g0a0" in listed


def test_a_parent_that_is_not_a_flow_id_is_refused() -> None:
    with pytest.raises(BadRequest, match="parent"):
        flow_filter({"parent": "no/such id"})
    assert flow_filter({"parent": "o-1", "tenant": "acme"}).parent == "acme~o-1"


def test_graph_names_the_child_flow() -> None:
    assert REGISTRY.of(ORDER.steps[0]).describe(ORDER.steps[0]) == "child flow payment"
