"""Callback tokens at the api's edge: never in a URL (the old route says where they go now and
completes nothing), never in a log line, hidden from viewers; a completer scoped to a tenant
cannot complete another tenant's tokens, nor tell them from tokens no flow has. Also: the
api's counters and metrics are for its viewers only.

Tokens are real RS256 JWTs verified by google-auth, as in test_api.py.
"""

from __future__ import annotations

import logging
import re

import pytest

from relayflow.core.state import Status
from relayflow.gcp.auth import TokenVerifier
from relayflow.web.access import Access
from relayflow.web.api import REDACTED

from .test_api import (
    API_URL,
    CERTS_URL,
    COMPLETER,
    OPERATOR,
    VIEWER,
    Api,
    build,
    certs_transport,
    message,
    token,
    waiting_flow,
)

ACME_HOOK, ACME_VIEWER = "hook@acme.example", "vi@acme.example"


@pytest.fixture
def api() -> Api:
    everyone = {VIEWER, OPERATOR, COMPLETER, ACME_HOOK, ACME_VIEWER}
    verifier = TokenVerifier(
        audience=API_URL, allowed_emails=everyone, certs_url=CERTS_URL, request=certs_transport
    )
    access = Access(
        verifier=verifier,
        viewers=frozenset({VIEWER, ACME_VIEWER}),
        operators=frozenset({OPERATOR}),
        completers=frozenset({COMPLETER, ACME_HOOK}),
        scopes={ACME_HOOK: frozenset({"acme"}), ACME_VIEWER: frozenset({"acme"})},
    )
    return build(access)


def waiting(api: Api, flow_id: str, tenant: str) -> str:
    """A ``wait`` flow of ``tenant`` whose callback step handed out its token; the token."""
    api.harness.start("wait", {}, flow_id=flow_id, tenant=tenant)
    record = api.harness.engine.find(flow_id, tenant=tenant)
    api.harness.deliver_next(record.key)
    found = api.harness.engine.find(flow_id, tenant=tenant).tracks["await_hook"].token
    assert found is not None
    return found


# -- where the token goes -------------------------------------------------------------------


def test_a_token_in_the_body_completes_and_is_no_part_of_the_output(api: Api) -> None:
    hook = waiting_flow(api, "f-1")
    response = api.client.post(
        "/callbacks", json={"token": hook, "id": "r-1"}, headers=token(COMPLETER)
    )
    assert response.status_code == 200 and response.get_json()["outcome"] == "completed"
    api.harness.run("f-1")
    assert api.harness.flow("f-1").outputs["await_hook"] == {"id": "r-1"}


def test_a_token_in_the_header_completes_with_the_body_as_output(api: Api) -> None:
    hook = waiting_flow(api, "f-1")
    headers = {**token(COMPLETER), "X-Relayflow-Callback-Token": hook}
    response = api.client.post("/callbacks", json={"error": {"code": "NO"}}, headers=headers)
    assert response.status_code == 200
    api.harness.run("f-1")
    record = api.harness.flow("f-1")
    assert record.status is Status.FAILED and record.result is not None
    assert record.result.code == "NO"


def test_a_callback_without_a_token_says_where_it_goes(api: Api) -> None:
    response = api.client.post("/callbacks", json={"output": {}}, headers=token(COMPLETER))
    assert response.status_code == 400
    assert "X-Relayflow-Callback-Token" in message(response)


def test_the_old_route_with_the_token_in_the_url_completes_nothing_and_says_why(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    hook = waiting_flow(api, "f-1")
    caplog.set_level(logging.DEBUG)
    response = api.client.post(f"/callbacks/{hook}", json={}, headers=token(COMPLETER))
    assert response.status_code == 410
    assert message(response).startswith("a callback token goes in the body of POST /callbacks")
    assert api.harness.flow("f-1").tracks["await_hook"].position.kind == "wait"
    assert hook not in caplog.text


def test_no_log_line_of_the_web_layer_holds_a_token(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    hook = waiting_flow(api, "f-1")
    caplog.set_level(logging.DEBUG)
    cross_site = {"Sec-Fetch-Site": "cross-site"}
    sent = [
        api.client.post(f"/callbacks/{hook}", json={}, headers=cross_site),  # refused, 403
        api.client.post(f"/callbacks/{hook}", json={}),  # 410
        api.client.post("/callbacks", json={"token": hook}),  # no caller: 401
        api.client.post("/callbacks", json={"token": hook}, headers=token(VIEWER)),  # 403
        api.client.post("/callbacks", json={"token": hook, "n": 7}, headers=token(OPERATOR)),
        api.client.post("/callbacks", json={"token": hook}, headers=token(OPERATOR)),
        api.client.post("/callbacks", json={"token": hook}, headers=token(OPERATOR)),  # again
    ]
    assert [r.status_code for r in sent] == [403, 410, 401, 403, 200, 409, 409]
    for record in caplog.records:
        assert hook not in record.getMessage()
        assert not [v for v in vars(record).values() if isinstance(v, str) and hook in v]


# -- who sees tokens ------------------------------------------------------------------------


def test_a_viewer_sees_that_a_step_waits_but_not_its_token(api: Api) -> None:
    hook = waiting_flow(api, "f-1")
    shown = api.client.get("/flows/f-1", headers=token(VIEWER)).get_json()
    assert shown["tracks"]["await_hook"]["token"] == REDACTED
    assert shown["tracks"]["await_hook"]["position"]["kind"] == "wait"
    listed = api.client.get("/flows?view=full", headers=token(VIEWER)).get_data(as_text=True)
    assert hook not in listed and REDACTED in listed
    page = api.client.get("/console/flows/f-1", headers=token(VIEWER)).get_data(as_text=True)
    assert hook not in page


def test_an_operator_who_may_complete_a_token_sees_it(api: Api) -> None:
    hook = waiting_flow(api, "f-1")
    shown = api.client.get("/flows/f-1", headers=token(OPERATOR)).get_json()
    assert shown["tracks"]["await_hook"]["token"] == hook


# -- tenant scope ---------------------------------------------------------------------------


def test_a_scoped_completer_cannot_tell_another_tenants_tokens_from_missing_ones(
    api: Api,
) -> None:
    running = waiting(api, "b-run", "globex")
    ended = waiting(api, "b-end", "globex")
    ended_key = api.harness.engine.find("b-end", tenant="globex").key
    api.harness.engine.cancel(ended_key, "done")
    assert api.harness.run(ended_key).status is Status.CANCELLED  # type: ignore[union-attr]
    secret = running.rpartition(".")[2]
    missing = f"globex~b-gone.{secret}"

    answers = [
        api.client.post("/callbacks", json={"token": t}, headers=token(ACME_HOOK))
        for t in (running, ended, missing)
    ]
    assert {a.status_code for a in answers} == {409}
    bodies = [a.get_json() for a in answers]
    assert [b["reason"] for b in bodies] == ["no flow has this token"] * 3
    # the same answer but for the id each token names, which the caller sent
    assert [re.sub(r"b-\w+", "b-?", a.get_data(as_text=True)) for a in answers] == [
        re.sub(r"b-\w+", "b-?", answers[2].get_data(as_text=True))
    ] * 3
    assert api.harness.engine.find("b-run", tenant="globex").status is Status.RUNNING


def test_a_scoped_completer_completes_its_own_tenants_token(api: Api) -> None:
    mine = waiting(api, "a-1", "acme")
    response = api.client.post("/callbacks", json={"token": mine}, headers=token(ACME_HOOK))
    assert response.get_json()["outcome"] == "completed"


def test_lanes_of_another_tenants_flow_answer_as_a_missing_flows(api: Api) -> None:
    waiting(api, "b-1", "globex")
    theirs = api.client.get("/flows/b-1/lanes", headers=token(ACME_VIEWER))
    missing = api.client.get("/flows/b-2/lanes", headers=token(ACME_VIEWER))
    assert theirs.status_code == missing.status_code == 404
    assert theirs.get_data(as_text=True) == missing.get_data(as_text=True).replace("b-2", "b-1")


# -- the api's counters and metrics ---------------------------------------------------------


@pytest.mark.parametrize("path", ["/stats", "/metrics"])
def test_the_apis_counters_and_metrics_are_for_its_viewers(api: Api, path: str) -> None:
    assert api.client.get(path).status_code == 401
    assert api.client.get(path, headers=token(COMPLETER)).status_code == 403
    assert api.client.get(path, headers=token(VIEWER)).status_code == 200
    # they span every tenant: not for a caller scoped to some
    scoped = api.client.get(path, headers=token(ACME_VIEWER))
    assert scoped.status_code == 403 and "is scoped to tenants" in message(scoped)


def test_locally_the_counters_and_metrics_are_open_to_this_machine() -> None:
    local = build(Access(verifier=None))
    assert local.client.get("/stats").status_code == 200
    assert local.client.get("/metrics").get_json()["enabled"] is False
