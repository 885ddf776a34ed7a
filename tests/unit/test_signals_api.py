"""Signals at the api's edge: ``POST /flows/{id}/signals/{name}`` for signallers and operators
(not viewers or completers), the caller recorded as who sent it, a flow outside a scoped
caller's tenants answered as a missing one, the answers' statuses (200 delivered, 202 kept,
404, 409, 413, 400 naming the problem), and a signal message on ``flow-signals`` (pushed to
``POST /signals``): delivered, a redelivery a no-op, a bad one recorded in ``rejected``.

Tokens are real RS256 JWTs verified by google-auth, as in test_api.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from relayflow.core.flows import ActionStep, Flow, Registry, WaitForSignal
from relayflow.core.state import Status
from relayflow.gcp.auth import TokenVerifier
from relayflow.metrics import Metrics
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.guard import RequestGuard
from relayflow.web.operations import Operations

from .test_api import (
    API_URL,
    CERTS_URL,
    COMPLETER,
    OPERATOR,
    VIEWER,
    Api,
    FakeDeadLetters,
    certs_transport,
    message,
    token,
)

SIGNALLER, ACME_SIGNALLER, APPROVER = "bot@example.com", "bot@acme.example", "boss@example.com"
APPROVAL = Flow(
    name="approval",
    steps=(
        ActionStep("order", lambda ctx: {}),
        WaitForSignal("approval", signal=("approve", "reject"), timeout_s=3600),
    ),
)


@pytest.fixture
def api() -> Api:
    everyone = {VIEWER, OPERATOR, COMPLETER, SIGNALLER, ACME_SIGNALLER, APPROVER}
    verifier = TokenVerifier(
        audience=API_URL, allowed_emails=everyone, certs_url=CERTS_URL, request=certs_transport
    )
    access = Access(
        verifier=verifier,
        viewers=frozenset({VIEWER, APPROVER}),
        operators=frozenset({OPERATOR}),
        completers=frozenset({COMPLETER}),
        signallers=frozenset({SIGNALLER, ACME_SIGNALLER, APPROVER}),
        scopes={ACME_SIGNALLER: frozenset({"acme"})},
    )
    return build_approval(access)


def build_approval(access: Access) -> Api:
    """The api over a harness running ``APPROVAL``."""
    h = Harness(APPROVAL)
    letters = FakeDeadLetters()
    ops = Operations(
        engine=h.engine,
        store=h.store,
        access=access,
        dead_letters=letters,
        counters=Counters(),
        metrics=Metrics(),
        registry=Registry((APPROVAL,)),
        guard=RequestGuard(),
    )
    return Api(h, build_api(ops).test_client(), letters)


def waiting(api: Api, flow_id: str, tenant: str | None = None) -> str:
    api.harness.start("approval", flow_id=flow_id, tenant=tenant)
    api.harness.run_until(api.harness.now)
    return flow_id


def test_a_signaller_sends_a_signal_the_flow_waits_for_and_is_recorded_as_who(api: Api) -> None:
    flow_id = waiting(api, "o-1")
    response = api.client.post(
        f"/flows/{flow_id}/signals/approve",
        json={"data": {"ok": True}, "reason": "checked", "signal_id": "s-1"},
        headers=token(SIGNALLER),
    )
    assert response.status_code == 200
    assert response.get_json() == {
        "outcome": "delivered",
        "flow_id": "o-1",
        "reason": "",
        "code": "",
    }
    record = api.harness.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["approval"]["by"] == SIGNALLER
    again = api.client.post(
        f"/flows/{flow_id}/signals/approve", json={"signal_id": "s-1"}, headers=token(SIGNALLER)
    )
    # a resend under its id hears it was taken, though the flow it ended has ended; another not
    assert again.status_code == 200 and again.get_json()["outcome"] == "duplicate"
    late = api.client.post(
        f"/flows/{flow_id}/signals/approve", json={"signal_id": "s-2"}, headers=token(SIGNALLER)
    )
    assert late.status_code == 409
    assert late.get_json()["code"] == "FLOW_ENDED"


def test_a_signal_before_the_step_is_kept_202_and_a_resend_is_a_duplicate(api: Api) -> None:
    api.harness.start("approval", flow_id="o-1")
    sent = {"data": {}, "signal_id": "s-1"}
    first = api.client.post("/flows/o-1/signals/reject", json=sent, headers=token(OPERATOR))
    second = api.client.post("/flows/o-1/signals/reject", json=sent, headers=token(OPERATOR))
    assert first.status_code == 202 and first.get_json()["outcome"] == "kept"
    assert second.status_code == 200 and second.get_json()["outcome"] == "duplicate"


def test_viewers_and_completers_may_not_signal_a_viewer_on_the_list_may(api: Api) -> None:
    flow_id = waiting(api, "o-1")
    for who in (VIEWER, COMPLETER):
        response = api.client.post(f"/flows/{flow_id}/signals/approve", json={}, headers=token(who))
        assert response.status_code == 403
        assert "RELAYFLOW_API_SIGNALLERS" in message(response)
    allowed = api.client.post(f"/flows/{flow_id}/signals/approve", json={}, headers=token(APPROVER))
    assert allowed.status_code == 200
    assert api.client.get(f"/flows/{flow_id}", headers=token(APPROVER)).status_code == 200
    assert api.client.get(f"/flows/{flow_id}", headers=token(SIGNALLER)).status_code == 403


def test_another_tenants_flow_answers_as_a_missing_one(api: Api) -> None:
    theirs = waiting(api, "o-1")  # the default tenant's
    waiting(api, "o-2", tenant="acme")
    hidden = api.client.post(
        f"/flows/{theirs}/signals/approve", json={}, headers=token(ACME_SIGNALLER)
    )
    missing = api.client.post("/flows/o-404/signals/approve", json={}, headers=token(SIGNALLER))
    own = api.client.post("/flows/o-2/signals/approve", json={}, headers=token(ACME_SIGNALLER))
    assert hidden.status_code == missing.status_code == 404
    assert message(hidden) == "no flow with id 'o-1'"
    assert own.status_code == 200
    assert api.harness.flow(theirs).status is Status.RUNNING


def test_bad_signals_are_refused_with_a_4xx_naming_the_problem(api: Api) -> None:
    flow_id = waiting(api, "o-1")
    url = f"/flows/{flow_id}/signals/approve"
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        (url, {"data": [1]}, 400, "JSON object"),
        (url, {"data": {"__x__": 1}}, 400, "reserved key"),
        (url, {"data": {"x": "a" * 9000}}, 413, "limit is 8192"),
        (url, {"signal_id": "no spaces"}, 400, "signal id"),
        (f"/flows/{flow_id}/signals/Approve", {}, 400, "name must match"),
        (f"/flows/{flow_id}/signals/cancel", {}, 409, "waits for: approve, reject"),
    ]
    for path, body, status, says in cases:
        response = api.client.post(path, json=body, headers=token(SIGNALLER))
        assert response.status_code == status, (path, body, response.get_json())
        assert says in message(response)
    huge = api.client.post(url, json={"data": {"x": "a" * 70_000}}, headers=token(SIGNALLER))
    assert huge.status_code == 413
    assert api.harness.flow(flow_id).status is Status.RUNNING


def pushed(data: dict[str, Any], message_id: str = "m-1") -> dict[str, Any]:
    encoded = base64.b64encode(json.dumps(data).encode()).decode()
    return {"message": {"data": encoded, "messageId": message_id}, "subscription": "s"}


def test_a_flow_signals_message_is_a_signal_once_however_often_it_comes(api: Api) -> None:
    flow_id = waiting(api, "o-1")
    body = pushed({"flow_id": flow_id, "signal": "approve", "data": {"n": 1}, "by": "erp"})
    first = api.client.post("/signals", json=body, headers=token(COMPLETER))
    again = api.client.post("/signals", json=body, headers=token(COMPLETER))
    assert first.status_code == 200 and first.get_json()["outcome"] == "delivered"
    assert again.status_code == 200 and again.get_json()["outcome"] in ("duplicate", "ignored")
    record = api.harness.run(flow_id)
    assert record is not None and record.outputs["approval"]["data"] == {"n": 1}
    assert record.outputs["approval"]["by"] == "erp (via flow-signals)"
    assert record.outputs["approval"]["signal_id"] == "msg-m-1"


def test_a_bad_flow_signals_message_is_acked_and_recorded_in_rejected(api: Api) -> None:
    waiting(api, "o-1")
    bad = pushed({"flow_id": "o-1", "signal": "approve", "data": "yes"}, message_id="m-2")
    unknown = pushed({"flow_id": "o-404", "signal": "approve"}, message_id="m-3")
    for body in (bad, unknown):
        response = api.client.post("/signals", json=body, headers=token(COMPLETER))
        assert response.status_code == 200  # acked: Pub/Sub does not deliver it again
    rejected = api.client.get("/rejected", headers=token(VIEWER)).get_json()["rejected"]
    reasons = {r["message_id"]: r["reason"] for r in rejected}
    assert "JSON object" in reasons["m-2"]
    assert "no flow with id 'o-404'" in reasons["m-3"]
