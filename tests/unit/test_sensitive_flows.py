"""Sensitive fields through the engine (the harness: the real engine and planner in memory,
sealing with an AES-SIV key): handlers see them in clear; the documents, the task bodies and
the result events hold none of them; a handler's text that quotes one is scrubbed; children
get their parent's sealed values sealed for themselves; refused messages are recorded without
them."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Annotated, Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from pydantic import BaseModel, field_validator

from relayflow import (
    ActionStep,
    CallbackStep,
    ChildFlow,
    Flow,
    ForEach,
    PermanentError,
    Sensitive,
    WaitForSignal,
)
from relayflow.apps.payment import PaymentInput, payment_flow
from relayflow.core.engine import Signalled, Started
from relayflow.core.flows import PollPolicy, StepContext
from relayflow.core.ports import Enqueued
from relayflow.core.records import NextTask
from relayflow.core.sealing import is_sealed
from relayflow.core.state import Status
from relayflow.telemetry import JsonFormatter
from relayflow.testing import Harness, MemorySealer
from tests.leaks import holds

CARD, CVC = "4111111111111111", "737"
INPUT = {"customer": "c-1", "amount_cents": 1250, "card": {"number": CARD, "cvc": CVC}}


def payment() -> Flow:
    return payment_flow(PollPolicy(initial_s=1, max_interval_s=2))


class Bodies:
    """Every task body the engine made: the queue's ensure, recorded."""

    def __init__(self, h: Harness) -> None:
        self.made: list[str] = []
        ensure = h.queue.ensure

        def recorded(flow_id: str, nxt: NextTask, chain: Any = ()) -> Enqueued:
            notes = [n.model_dump(mode="json") for n in chain]
            self.made.append(json.dumps({"next": nxt.model_dump(mode="json"), "chain": notes}))
            return ensure(flow_id, nxt, chain)

        h.queue.ensure = recorded  # type: ignore[method-assign]

    def text(self) -> str:
        return "\n".join(self.made)


def secrets_of(token: str) -> tuple[str, ...]:
    return (CARD, CVC, token)


def test_handlers_see_them_in_clear_and_nothing_else_does() -> None:
    h = Harness(payment(), poll_chain=3)
    bodies = Bodies(h)
    flow_id = h.start("payment", INPUT, flow_id="pay-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED, record
    # the handlers read the card and the token in clear
    (authorize,) = h.calls_of("authorize")
    assert authorize.input["card"] == {"number": CARD, "cvc": CVC}
    token = h.opened(flow_id).outputs["authorize"]["token"]
    assert token.startswith("tok_")
    assert all(c.outputs["authorize"]["token"] == token for c in h.calls_of("settle"))
    assert h.opened(flow_id).result.data == {  # type: ignore[union-attr]
        "customer": "c-1",
        "amount_cents": 1250,
        "last4": "1111",
        "token": token,
    }
    # ... the documents, the task bodies and the result events hold none of it
    stored = json.dumps(h.store.docs, default=str)
    events = json.dumps(h.events.published)
    assert any("chain" in b and "pending" in b for b in bodies.made)  # a chain's notes
    for where in (stored, bodies.text(), events):
        assert not [s for s in secrets_of(token) if holds(where, s)], where
    assert is_sealed(h.events.published[0]["data"]["token"])
    assert "[redacted]" in bodies.text()  # the not-ready detail named the token: scrubbed
    details = [e.outcome for e in record.history if e.step == "settle"]
    assert "not ready: settlement of [redacted] pending" in details


def test_a_handlers_error_that_quotes_one_is_scrubbed_and_its_log_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def decline(ctx: StepContext) -> dict[str, Any]:
        card = ctx.input["card"]["number"]
        logging.getLogger("acme.payments").warning("declining card %s", card)
        raise PermanentError(f"card {card} declined", code="DECLINED")

    flow = Flow("pay", (ActionStep("charge", decline),), input_model=PaymentInput)
    h = Harness(flow)
    formatted: list[str] = []
    formatter = JsonFormatter()

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            formatted.append(formatter.format(record))

    keep = Keep()
    logging.getLogger().addHandler(keep)
    try:
        record = h.run(h.start("pay", INPUT))
    finally:
        logging.getLogger().removeHandler(keep)
    assert record is not None and record.result is not None
    assert record.result.message == "card [redacted] declined"
    assert CARD not in json.dumps(h.store.docs, default=str)
    lines = [line for line in formatted if "declining" in line]
    assert lines and all(CARD not in line and "[redacted]" in line for line in lines)


def test_no_span_holds_one(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    def refuse(ctx: StepContext) -> dict[str, Any]:
        raise PermanentError(f"token {ctx.outputs['authorize']['token']} refused", code="NO")

    h = Harness(payment(), tracer=tracer)
    h.script("receipt", refuse)
    record = h.run(h.start("payment", INPUT, flow_id="pay-1"))
    assert record is not None and record.status is Status.FAILED
    token = h.opened("pay-1").outputs["authorize"]["token"]
    spans = exporter.get_finished_spans()
    shown = json.dumps(
        [
            [dict(s.attributes or {}), s.status.description, [e.name for e in s.events]]
            for s in spans
        ]
    )
    assert len(spans) > 3 and not [v for v in secrets_of(token) if v in shown]
    assert "token [redacted] refused" in shown


def test_a_callbacks_completion_and_a_signals_data_are_sealed_where_their_step_marks_them() -> None:
    seen: list[dict[str, Any]] = []

    def ship(ctx: StepContext) -> dict[str, Any]:
        seen.append({"pin": ctx.outputs["issue"]["pin"], "code": ctx.outputs["approve"]["data"]})
        return {}

    flow = Flow(
        "cards",
        (
            CallbackStep("issue", lambda ctx: {"sent": True}, timeout_s=600),
            WaitForSignal("approve", signal="approve"),
            ActionStep("ship", ship),
        ),
        sensitive=("outputs.issue.pin", "outputs.approve.data.code"),
    )
    h = Harness(flow)
    flow_id = h.start("cards", {}, flow_id="c-1")
    h.run_until(h.now + timedelta(seconds=1))
    sent = h.signal(flow_id, "approve", {"code": "CODE-7731"})
    assert sent.outcome is Signalled.KEPT  # its step has not begun: kept on the document
    kept = json.dumps(h.store.docs, default=str)
    assert "signals" in kept and "$sealed" in kept
    h.complete(h.token(flow_id, "issue"), {"pin": "PIN-9911"})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED, record.result
    assert seen == [{"pin": "PIN-9911", "code": {"code": "CODE-7731"}}]
    for stored in (kept, json.dumps(h.store.docs, default=str)):
        assert "PIN-9911" not in stored and "CODE-7731" not in stored


def test_a_duplicate_start_is_a_duplicate_and_a_conflicting_one_is_recorded_redacted() -> None:
    h = Harness(payment())
    h.start("payment", INPUT, flow_id="pay-1")
    again = h.publish({"flow": "payment", "input": INPUT, "flow_id": "pay-1"})
    assert again.outcome is Started.DUPLICATE
    other = {**INPUT, "card": {"number": "5500000000000004", "cvc": "123"}}
    conflict = h.publish({"flow": "payment", "input": other, "flow_id": "pay-1"})
    assert conflict.outcome is Started.REJECTED
    (kept,) = h.store.rejected.values()
    assert "5500000000000004" not in json.dumps(kept, default=str)
    shown = json.loads(__import__("base64").b64decode(kept["data_base64"]))
    assert shown["input"]["card"] == {"number": "[redacted]", "cvc": "[redacted]"}
    assert shown["input"]["customer"] == "c-1" and kept["redacted"] == "sensitive fields redacted"


def test_a_message_whose_flow_cannot_be_told_keeps_no_data() -> None:
    h = Harness(payment())
    refused = h.publish(json.dumps({"flow": "nope", "input": INPUT}).encode())
    assert refused.outcome is Started.REJECTED
    (kept,) = h.store.rejected.values()
    assert kept["data_base64"] == "" and kept["redacted"].startswith("withheld")
    assert kept["data_bytes"] > 0 and "unknown flow 'nope'" in kept["reason"]


def test_a_child_gets_its_parents_sealed_values_sealed_for_itself() -> None:
    seen: list[dict[str, Any]] = []

    def parent_reads(ctx: StepContext) -> dict[str, Any]:
        seen.append(dict(ctx.outputs["pay"]))
        return {}

    parent = Flow(
        "checkout",
        (ChildFlow("pay", flow="payment"), ActionStep("ship", parent_reads)),
        input_model=PaymentInput,
    )
    h = Harness((parent, payment()))
    flow_id = h.start("checkout", INPUT, flow_id="co-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED, record
    (authorize,) = h.calls_of("authorize")
    assert authorize.input["card"]["number"] == CARD  # the child opened what it was given
    assert seen[0]["last4"] == "1111" and seen[0]["token"].startswith("tok_")
    stored = json.dumps(h.store.docs, default=str)
    assert CARD not in stored and seen[0]["token"] not in stored


def test_a_value_that_does_not_open_is_retried_then_fails_the_flow() -> None:
    h = Harness(payment())
    flow_id = h.start("payment", INPUT, flow_id="pay-1")
    h.sealer = MemorySealer()  # a deployment whose keyset lacks the key that sealed it
    h.engine = h._build()
    record = h.run(flow_id)
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "RETRIES_EXHAUSTED"
    assert "keyset lacks its key" in record.result.message
    assert h.calls_of("authorize") == []  # no handler ran with what did not open


def test_a_foreach_items_outputs_are_sealed_and_their_undo_run_by_the_flow_reads_them() -> None:
    undone: list[str] = []

    def tokenize(ctx: StepContext) -> dict[str, Any]:
        if ctx.item == 2:
            raise PermanentError("declined", code="DECLINED")
        return {"token": f"tok_item_{ctx.item}"}

    def untokenize(ctx: StepContext) -> dict[str, Any]:
        undone.append(ctx.outputs["tokenize"]["token"])
        return {}

    each = ForEach(
        "each",
        items=lambda ctx: [0, 1, 2],
        steps=(ActionStep("tokenize", tokenize, compensate=untokenize),),
        concurrency=1,
    )
    h = Harness(Flow("batch", (each,), sensitive=("outputs.each.items.*.token",)))
    record = h.run(h.start("batch", {}, flow_id="b-1"))
    assert record is not None and record.status is Status.FAILED, record.result
    assert sorted(undone) == ["tok_item_0", "tok_item_1"]  # undone by the flow, in clear
    assert "tok_item_" not in json.dumps(h.store.docs, default=str)


class Issued(BaseModel):
    token: Annotated[str, Sensitive]

    @field_validator("token")
    @classmethod
    def known(cls, token: str) -> str:
        raise ValueError(f"token {token} is not one we issued")


def test_the_output_check_reads_them_opened_and_its_message_is_scrubbed() -> None:
    flow = Flow(
        "issue", (ActionStep("make", lambda ctx: {"token": "tok_not_ours_1"}),), output_model=Issued
    )
    h = Harness(flow)
    record = h.run(h.start("issue", {}, flow_id="i-1"))
    assert record is not None and record.result is not None
    assert record.result.code == "OUTPUT_INVALID"  # checked in clear: the validator ran
    assert "token [redacted] is not one we issued" in record.result.message
    assert "tok_not_ours_1" not in json.dumps(h.store.docs, default=str)
