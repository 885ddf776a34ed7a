"""Typed flows: ``output_model`` checks the result a flow would succeed with, ``input_as``
reads the input as a model, and ``definitions`` publishes both schemas with the steps."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from relayflow import ActionStep, Flow, PermanentError, Registry, StepContext
from relayflow.core.definitions import definition, definitions
from relayflow.core.state import Status
from relayflow.testing import Harness


class Order(BaseModel):
    order_id: str
    amount_cents: int


class Receipt(BaseModel):
    receipt_id: str
    amount_cents: int


def charge(ctx: StepContext) -> dict[str, Any]:
    order = ctx.input_as(Order)
    return {"charge_id": f"ch-{order.order_id}", "amount_cents": order.amount_cents}


def receipt(ctx: StepContext) -> dict[str, Any]:
    return {
        "receipt_id": ctx.outputs["charge"]["charge_id"],
        "amount_cents": ctx.input["amount_cents"],
    }


def bad_receipt(ctx: StepContext) -> dict[str, Any]:
    return {"receipt": 7}


def checkout(last: Any = receipt, version: int = 1) -> Flow:
    return Flow(
        "checkout",
        (
            ActionStep("charge", charge, compensate=lambda ctx: {"refunded": True}),
            ActionStep("issue_receipt", last),
        ),
        input_model=Order,
        output_model=Receipt,
        version=version,
    )


def test_a_flow_whose_output_fits_its_model_succeeds_with_it() -> None:
    h = Harness(checkout())
    flow_id = h.start("checkout", {"order_id": "o-1", "amount_cents": 1200})
    record = h.run(flow_id)
    assert record is not None and record.result is not None
    assert record.status is Status.SUCCEEDED
    assert Receipt.model_validate(record.result.data) == Receipt(
        receipt_id="ch-o-1", amount_cents=1200
    )


def test_an_output_that_does_not_fit_fails_the_flow_and_undoes_what_it_did() -> None:
    h = Harness(checkout(bad_receipt))
    flow_id = h.start("checkout", {"order_id": "o-2", "amount_cents": 500})
    record = h.run(flow_id)
    assert record is not None and record.result is not None
    assert (record.status, record.result.code) == (Status.FAILED, "OUTPUT_INVALID")
    assert "the output of checkout v1 is not a Receipt: receipt_id: Field required" in (
        record.result.message
    )
    assert [c.step for c in h.calls_of("charge", undo=True)] == ["charge"]


def test_input_as_reads_the_input_as_its_model_and_refuses_what_does_not_fit() -> None:
    ctx = StepContext("f-1", "checkout", "charge", {"order_id": 5}, {}, "k")
    with pytest.raises(PermanentError, match="is not a Order: order_id: Input should be") as raised:
        ctx.input_as(Order)
    assert raised.value.code == "INPUT_INVALID"
    fits = StepContext("f-1", "checkout", "charge", {"order_id": "o", "amount_cents": 1}, {}, "k")
    assert fits.input_as(Order) == Order(order_id="o", amount_cents=1)


def test_a_definition_names_its_steps_and_publishes_both_schemas() -> None:
    shown = definition(checkout(), newest=True)
    assert [(s["name"], s["kind"], s["after"]) for s in shown["steps"]] == [
        ("charge", "action", []),
        ("issue_receipt", "action", ["charge"]),
    ]
    assert shown["input_schema"] == Order.model_json_schema()
    assert shown["output_schema"]["required"] == ["receipt_id", "amount_cents"]


def test_definitions_list_every_version_and_mark_the_newest() -> None:
    untyped = Flow("plain", (ActionStep("only", receipt),))
    shown = definitions(Registry((checkout(), checkout(version=2), untyped)))
    assert [(d["flow"], d["version"], d["newest"]) for d in shown] == [
        ("checkout", 1, False),
        ("checkout", 2, True),
        ("plain", 1, True),
    ]
    assert (shown[2]["input_schema"], shown[2]["output_schema"]) == (None, None)
