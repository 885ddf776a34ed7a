"""Marking sensitive fields (relayflow.core.sensitive): in a flow's models (``Sensitive``,
``json_schema_extra``), nested, in lists and dicts, by path on the flow; every path checked when
the flow is defined; the published JSON Schema says which fields are sensitive."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from relayflow import ActionStep, Flow, Sensitive
from relayflow.core.errors import ConfigError
from relayflow.core.sensitive import under


class Card(BaseModel):
    number: Annotated[str, Sensitive]
    cvc: str = Field(json_schema_extra={"sensitive": True})
    brand: str = "visa"


class Order(BaseModel):
    customer: str
    card: Card
    spare: list[Card] = []
    by_name: dict[str, Card] = {}
    maybe: Card | None = None
    secret_alias: Annotated[str, Sensitive] = Field(default="", alias="secretAlias")


class Receipt(BaseModel):
    token: Annotated[str, Sensitive]


def noop(ctx: Any) -> dict[str, Any]:
    return {}


def test_a_models_marks_are_paths_of_the_input() -> None:
    flow = Flow("pay", (ActionStep("charge", noop),), input_model=Order)
    assert set(flow.sensitive_paths) == {
        ("input", "card", "number"),
        ("input", "card", "cvc"),
        ("input", "spare", "*", "number"),
        ("input", "spare", "*", "cvc"),
        ("input", "by_name", "*", "number"),
        ("input", "by_name", "*", "cvc"),
        ("input", "maybe", "number"),
        ("input", "maybe", "cvc"),
        ("input", "secretAlias"),  # as the input's JSON names it
    }


def test_the_output_models_marks_are_the_last_steps_outputs() -> None:
    flow = Flow(
        "pay",
        (ActionStep("charge", noop), ActionStep("receipt", noop)),
        output_model=Receipt,
        sensitive=("outputs.charge.token",),
    )
    assert set(flow.sensitive_paths) == {
        ("outputs", "charge", "token"),
        ("outputs", "receipt", "token"),
    }


def test_the_published_schema_says_which_fields_are_sensitive() -> None:
    schema = Card.model_json_schema()
    assert schema["properties"]["number"]["sensitive"] is True
    assert schema["properties"]["cvc"]["sensitive"] is True
    assert "sensitive" not in schema["properties"]["brand"]


@pytest.mark.parametrize(
    ("paths", "problem"),
    [
        (("card.number",), "starts with 'input.' or 'outputs.<step>.'"),
        (("input",), "names a field inside the input"),
        (("outputs.charge",), "names a field inside a step's output"),
        (("input..number",), "each part non-empty"),
        (("outputs.refund.id",), "names no step of the flow"),
        ("input.card", "a tuple of paths, not a string"),
    ],
)
def test_a_bad_path_is_refused_when_the_flow_is_defined(paths: Any, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace(".", r"\.").replace("(", r"\(")):
        Flow("pay", (ActionStep("charge", noop),), sensitive=paths)


def test_what_lies_under_a_value() -> None:
    paths = [("input", "card", "number"), ("outputs", "*", "token"), ("input", "x")]
    assert under(paths, ("input", "card")) == [("number",)]
    assert under(paths, ("outputs", "charge")) == [("token",)]
    assert under(paths, ("input",)) == [("card", "number"), ("x",)]
