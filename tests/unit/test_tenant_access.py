"""Tenant-scoped api access and the tenants routes: a viewer of tenant A does not see
tenant B's flows (404, as if they did not exist), lists are narrowed to the caller's tenants,
unscoped-only routes are refused, and operators pause and resume tenants through the api.

Tokens are real RS256 JWTs verified by google-auth, as in test_api.py.
"""

from __future__ import annotations

import pytest

from relayflow.core.state import Status
from relayflow.core.tenants import TenantPolicy, Tenants
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from tests.unit.test_api import (
    FLOW,
    OPERATOR,
    VIEWER,
    Api,
    message,
    operations,
    token,
    verifier,
)

ACME_VIEWER, ACME_OPERATOR = "acme-vi@example.com", "acme-op@example.com"
TWO_TENANTS = "both@example.com"


def scoped_access() -> Access:
    """Viewers and operators by token: an unscoped one of each, one of each scoped to acme, and
    a viewer scoped to acme and globex."""
    return Access(
        verifier=verifier(VIEWER, OPERATOR, ACME_VIEWER, ACME_OPERATOR, TWO_TENANTS),
        viewers=frozenset({VIEWER, ACME_VIEWER, TWO_TENANTS}),
        operators=frozenset({OPERATOR, ACME_OPERATOR}),
        scopes={
            ACME_VIEWER: frozenset({"acme"}),
            ACME_OPERATOR: frozenset({"acme"}),
            TWO_TENANTS: frozenset({"acme", "globex"}),
        },
    )


@pytest.fixture
def api() -> Api:
    h = Harness(FLOW, tenants=Tenants(tenants={"acme": TenantPolicy(max_running=5)}))
    ops = operations(h, scoped_access())
    return Api(h, build_api(ops).test_client(), ops.dead_letters)  # type: ignore[arg-type]


def start(api: Api, flow_id: str, tenant: str) -> str:
    api.harness.start("demo", {}, flow_id=flow_id, tenant=tenant)
    return flow_id


def test_a_scoped_viewer_sees_its_tenants_flow_and_not_anothers(api: Api) -> None:
    mine, theirs = start(api, "a-1", "acme"), start(api, "b-1", "globex")
    assert api.client.get(f"/flows/{mine}", headers=token(ACME_VIEWER)).status_code == 200
    other = api.client.get(f"/flows/{theirs}", headers=token(ACME_VIEWER))
    missing = api.client.get("/flows/nope", headers=token(ACME_VIEWER))
    assert other.status_code == missing.status_code == 404
    assert message(other) == "no flow with id 'b-1'"  # as for a flow that does not exist
    lanes = api.client.get(f"/flows/{theirs}/lanes", headers=token(ACME_VIEWER))
    assert lanes.status_code == 404
    # An unscoped viewer sees both.
    assert api.client.get(f"/flows/{theirs}", headers=token(VIEWER)).status_code == 200


def test_a_scoped_callers_lists_and_counts_hold_only_its_tenants(api: Api) -> None:
    start(api, "a-1", "acme"), start(api, "a-2", "acme"), start(api, "b-1", "globex")
    listed = api.client.get("/flows", headers=token(ACME_VIEWER)).get_json()["flows"]
    assert sorted(f["flow_id"] for f in listed) == ["a-1", "a-2"]
    assert {f["tenant"] for f in listed} == {"acme"}
    counts = api.client.get("/flows:counts", headers=token(ACME_VIEWER)).get_json()
    assert counts["total"] == 2
    asked = api.client.get("/flows?tenant=globex", headers=token(ACME_VIEWER))
    assert asked.status_code == 403
    assert message(asked) == f"{ACME_VIEWER} may not see tenant 'globex'"
    # A caller with two tenants names one; everyone else may filter by tenant at will.
    unnamed = api.client.get("/flows", headers=token(TWO_TENANTS))
    assert unnamed.status_code == 403 and "name one with tenant=" in message(unnamed)
    named = api.client.get("/flows?tenant=globex", headers=token(TWO_TENANTS)).get_json()
    assert [f["flow_id"] for f in named["flows"]] == ["b-1"]
    everyone = api.client.get("/flows?tenant=acme", headers=token(VIEWER)).get_json()
    assert len(everyone["flows"]) == 2


def test_a_scoped_operator_acts_on_its_tenant_only(api: Api) -> None:
    mine, theirs = start(api, "a-1", "acme"), start(api, "b-1", "globex")
    body = {"reason": "tidy up"}
    refused = api.client.post(f"/flows/{theirs}:cancel", json=body, headers=token(ACME_OPERATOR))
    assert refused.status_code == 404
    assert api.harness.flow(theirs).status is Status.PENDING
    done = api.client.post(f"/flows/{mine}:cancel", json=body, headers=token(ACME_OPERATOR))
    assert done.status_code == 200
    assert api.harness.flow(mine).status is not Status.PENDING
    paused = api.client.post("/tenants/globex:pause", json=body, headers=token(ACME_OPERATOR))
    assert paused.status_code == 403


def test_messages_no_tenant_vouches_for_are_refused_to_scoped_callers(api: Api) -> None:
    for path in ("/rejected", "/dead-letters"):
        answer = api.client.get(path, headers=token(ACME_VIEWER))
        assert answer.status_code == 403, path
        assert "is scoped to tenants" in message(answer)
        assert api.client.get(path, headers=token(VIEWER)).status_code == 200


def test_whoami_names_the_callers_tenants(api: Api) -> None:
    me = api.client.get("/whoami", headers=token(TWO_TENANTS)).get_json()
    assert me == {"identity": TWO_TENANTS, "role": "viewer", "tenants": ["acme", "globex"]}


def test_operators_pause_and_resume_a_tenant_through_the_api(api: Api) -> None:
    flow_id = start(api, "a-1", "acme")
    paused = api.client.post(
        "/tenants/acme:pause", json={"reason": "their API is down"}, headers=token(OPERATOR)
    )
    assert paused.get_json() == {
        "tenant": "acme",
        "paused": True,
        "by": OPERATOR,
        "reason": "their API is down",
    }
    views = api.client.get("/tenants", headers=token(ACME_VIEWER)).get_json()["tenants"]
    assert [(v["tenant"], v["paused"], v["paused_by"]) for v in views] == [
        ("acme", True, OPERATOR)
    ]  # a scoped viewer sees its own tenant only
    assert views[0]["max_running"] == 5 and views[0]["running"] == 1
    api.harness.deliver_next(flow_id)  # put off, not run
    assert api.harness.flow(flow_id).history[-1].outcome == "deferred"
    resumed = api.client.post(
        "/tenants/acme:resume", json={"reason": "back"}, headers=token(OPERATOR)
    )
    assert resumed.get_json()["paused"] is False
    assert resumed.get_json()["brought_forward"] == 1  # the task the pause put off runs now


def test_pausing_needs_an_operator_a_reason_and_a_tenant_name(api: Api) -> None:
    viewer = api.client.post("/tenants/acme:pause", json={"reason": "x"}, headers=token(VIEWER))
    assert viewer.status_code == 403
    no_reason = api.client.post("/tenants/acme:pause", json={}, headers=token(OPERATOR))
    assert no_reason.status_code == 400
    bad = api.client.post(
        "/tenants/Not_A_Tenant:pause", json={"reason": "x"}, headers=token(OPERATOR)
    )
    assert bad.status_code == 400
    assert "is not a tenant name" in message(bad)
