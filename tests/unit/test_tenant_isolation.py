"""Tenants kept apart in the engine (issue 18): the topic a start message came by, not the
message, says whose flow it is; a message never raises its priority above its tenant's
policy; callback tokens of another tenant's flow answer as tokens no flow has; tokens are
compared in constant time."""

from __future__ import annotations

import json

import pytest

from relayflow import CallbackStep, Flow, StepContext
from relayflow.core.engine import Completion, Started
from relayflow.core.engine import callbacks as engine_module
from relayflow.core.errors import AmbiguousFlow, FlowNotFound
from relayflow.core.state import Status
from relayflow.core.tenants import TenantPolicy, Tenants
from relayflow.testing import Harness

ACME = Tenants(tenants={"acme": TenantPolicy(max_running=5), "globex": TenantPolicy()})


def _sent(ctx: StepContext) -> dict[str, str]:
    return {"sent": ctx.callback_token}


def waiting_flow() -> Flow:
    return Flow("approval", [CallbackStep("approve", run=_sent, timeout_s=3600)])


def start_message(**extra: object) -> bytes:
    return json.dumps({"flow": "approval", "input": {}, **extra}).encode()


@pytest.mark.parametrize(
    ("topic_of", "named", "where"),
    [
        ("default", "acme", "flow-requests, which starts the default tenant's flows only"),
        ("globex", "acme", "tenant 'globex''s own topic"),
    ],
    ids=["shared-topic", "another-tenants-topic"],
)
def test_a_message_cannot_start_a_flow_of_a_tenant_whose_topic_it_did_not_come_by(
    topic_of: str, named: str, where: str
) -> None:
    h = Harness(waiting_flow(), tenants=ACME)
    for attributes, body in (({}, {"tenant": named}), ({"tenant": named}, {})):
        result = h.publish(start_message(**body), tenant=topic_of, attributes=attributes)
        assert result.outcome is Started.REJECTED
        assert result.reason is not None and where in result.reason
        assert "flow-requests.acme" in result.reason
    assert h.store.docs == {}  # nothing started, nothing of acme's quota spent
    assert len(h.store.rejected) == 2


def test_a_tenants_own_topic_starts_its_flows_named_or_not() -> None:
    h = Harness(waiting_flow(), tenants=ACME)
    unnamed = h.publish(start_message(flow_id="f1"), tenant="acme")
    named = h.publish(start_message(flow_id="f2", tenant="acme"), tenant="acme")
    assert unnamed.outcome is Started.STARTED and named.outcome is Started.STARTED
    assert {doc["tenant"] for doc in h.store.docs.values()} == {"acme"}


def test_a_token_of_another_tenants_flow_is_answered_as_a_token_no_flow_has() -> None:
    h = Harness(waiting_flow(), tenants=ACME)
    running = h.start("approval", flow_id="b-run", tenant="globex")
    ended = h.start("approval", flow_id="b-end", tenant="globex")
    h.deliver_next(running)
    h.deliver_next(ended)
    live, done = (h.flow(running).tracks["approve"].token, h.flow(ended).tracks["approve"].token)
    assert live and done
    h.cancel(ended)
    assert h.flow(ended).status is Status.CANCELLED
    acme_only = frozenset({"acme"}).__contains__
    missing = h.engine.complete(f"nobody.{live.split('.')[1]}", {"output": {}}, visible=acme_only)
    answers = [
        h.engine.complete(token, {"output": {}}, visible=acme_only) for token in (live, done)
    ]
    assert [(a.outcome, a.reason) for a in answers] == [(missing.outcome, missing.reason)] * 2
    assert missing.outcome is Completion.IGNORED and missing.reason == "no flow has this token"
    assert h.flow(running).tracks["approve"].token == live  # still waiting: nothing changed


def test_callback_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = engine_module.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(engine_module.hmac, "compare_digest", spy)
    h = Harness(waiting_flow())
    flow_id = h.start("approval")
    h.deliver_next(flow_id)
    token = h.flow(flow_id).tracks["approve"].token
    assert token is not None
    guess = token[:-1] + ("0" if token[-1] != "0" else "1")
    assert h.engine.complete(guess, {"output": {}}).outcome is Completion.IGNORED
    assert (token.encode(), guess.encode()) in compared
    assert h.engine.complete(token, {"output": {}}).outcome is Completion.COMPLETED


def test_each_tenant_has_its_own_flow_ids() -> None:
    h = Harness(waiting_flow(), tenants=ACME)
    a = h.publish(start_message(flow_id="order-42"), tenant="acme")
    b = h.publish(start_message(flow_id="order-42"), tenant="globex")

    assert (a.outcome, b.outcome) == (Started.STARTED, Started.STARTED)  # not a duplicate
    assert sorted(h.store.docs) == ["acme~order-42", "globex~order-42"]
    acme, globex = (h.engine.find("order-42", tenant=t) for t in ("acme", "globex"))
    assert (acme.tenant, globex.tenant) == ("acme", "globex")
    assert acme.flow_id == globex.flow_id == "order-42"
    assert acme.next is not None and globex.next is not None
    assert acme.next.task_id != globex.next.task_id  # their tasks never collide either
    with pytest.raises(AmbiguousFlow, match="tenants acme, globex"):
        h.engine.find("order-42")
    assert h.engine.find("order-42", visible={"globex"}.__contains__).tenant == "globex"
    with pytest.raises(FlowNotFound):
        h.engine.find("order-42", visible={"initech"}.__contains__)


def test_a_tenants_callback_completes_its_own_flow_only() -> None:
    h = Harness(waiting_flow(), tenants=ACME)
    h.publish(start_message(flow_id="same"), tenant="acme")
    h.publish(start_message(flow_id="same"), tenant="globex")
    h.run_until(h.now)
    acme = h.engine.find("same", tenant="acme")
    token = acme.tracks["approve"].token
    assert token is not None and token.startswith("acme~same.")

    answer = h.engine.complete(token, {"output": {"ok": True}})

    assert answer.outcome is Completion.COMPLETED and answer.flow_id == "same"
    assert h.engine.find("same", tenant="acme").status is Status.SUCCEEDED
    assert h.engine.find("same", tenant="globex").status is Status.RUNNING
