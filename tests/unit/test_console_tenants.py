"""The console's tenants page in process: each tenant's quota use, waiting flows, priority and
state; pause and resume behind a confirmation that asks why and records who; bad input (no
reason, an unknown tenant, a bad name or action) is a clear error page and changes nothing;
viewers get no buttons, scoped callers see and act on their own tenants only, on this page and
in the flow list's tenant filter."""

from __future__ import annotations

import re

import pytest

from relayflow.core.ports import TenantState
from relayflow.core.tenants import TenantPolicy, Tenants
from relayflow.web.access import Access

from .test_api import VIEWER, Api, build, token
from .test_console import SAME_SITE, text
from .test_tenant_access import ACME_OPERATOR, TWO_TENANTS, scoped_access

POLICY = Tenants(
    tenants={
        "acme": TenantPolicy(max_running=2, priority="high"),
        "globex": TenantPolicy(starts_per_s=5.0),
        "frozen": TenantPolicy(paused=True),
    }
)


@pytest.fixture
def local() -> Api:
    return build(Access(verifier=None), tenants=POLICY)  # the local stack: an operator


@pytest.fixture
def cloud() -> Api:
    """Callers with tokens: viewers and operators, some scoped to tenants."""
    return build(scoped_access(), tenants=POLICY)


def rows(page: str) -> dict[str, dict[str, str]]:
    """Each tenant's row: its data attributes."""
    found = re.findall(
        r'data-tenant="([^"]+)" data-paused="(\w+)" data-running="(\d+)" data-waiting="(\d+)"',
        page,
    )
    return {t: {"paused": p, "running": r, "waiting": w} for t, p, r, w in found}


def test_the_page_shows_each_tenants_quota_use_waiting_flows_and_state(local: Api) -> None:
    # given acme (2 at a time) with three flows, one of which waits, and a default flow
    for i in range(3):
        local.harness.start("demo", {}, flow_id=f"a-{i}", tenant="acme")
    local.harness.start("demo", {}, flow_id="d-0")

    page = text(local.client.get("/console/tenants"))

    assert rows(page) == {
        "acme": {"paused": "false", "running": "2", "waiting": "1"},
        "default": {"paused": "false", "running": "1", "waiting": "0"},
        "frozen": {"paused": "true", "running": "0", "waiting": "0"},
        "globex": {"paused": "false", "running": "0", "waiting": "0"},
    }
    assert '<meter min="0" max="2" high="2" value="2"' in page and "2 / 2 running" in page
    assert '<span class="badge priority-high">high</span>' in page
    # the tenant's flows, and those waiting for a slot, one click away
    assert 'href="/console/flows?tenant=acme&amp;status=PENDING">1</a>' in page
    assert 'href="/console/flows?tenant=globex">globex</a>' in page
    assert 'id="pause-acme" href="/console/tenants/acme/pause"' in page
    # a tenant its policy pauses: said so, and no button (a resume would not lift it)
    assert "in its policy (RELAYFLOW_TENANTS)" in page
    assert 'id="resume-frozen"' not in page and 'id="pause-frozen"' not in page
    assert 'href="/console/tenants" class="here">Tenants</a>' in page  # the nav


def test_pause_asks_why_records_who_and_when_and_resume_undoes_it(local: Api) -> None:
    h = local.harness
    confirm = text(local.client.get("/console/tenants/acme/pause"))
    assert "Pause tenant acme?" in confirm and 'name="reason"' in confirm

    done = local.client.post(
        "/console/tenants/acme/pause", data={"reason": "their API is down"}, headers=SAME_SITE
    )

    assert done.status_code == 303
    assert done.headers["Location"].endswith("/console/tenants?notice=pause&tenant=acme")
    paused_at = h.now
    assert h.store.tenant_state("acme") == TenantState(
        "acme", True, "local", "their API is down", paused_at
    )
    page = text(local.client.get(done.headers["Location"]))
    assert "<strong>acme</strong>: Pause recorded" in page
    assert rows(page)["acme"]["paused"] == "true"
    assert re.search(r"paused</span> by local <span[^>]*>since \d\d-\d\d \d\d:\d\d:\d\d", page)
    assert '<div class="why">their API is down</div>' in page
    assert 'id="resume-acme"' in page

    # a flow of the paused tenant waits: none is admitted while it is paused
    flow_id = h.start("demo", {}, flow_id="a-1", tenant="acme")
    assert h.flow(flow_id).admission == "waiting"
    assert rows(text(local.client.get("/console/tenants")))["acme"]["waiting"] == "1"

    resume = text(local.client.get("/console/tenants/acme/resume"))
    assert "Resume tenant acme?" in resume and "1 waiting flow is admitted" in resume
    assert "Paused by local since" in resume and "their API is down" in resume
    resumed = local.client.post(
        "/console/tenants/acme/resume", data={"reason": "back up"}, headers=SAME_SITE
    )
    assert resumed.status_code == 303
    assert h.store.tenant_state("acme").paused is False
    assert h.flow(flow_id).admission == "admitted"  # resumed: its waiting flow goes on
    page = text(local.client.get("/console/tenants"))
    assert "resumed by local at" in page and ": back up" in page


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/console/tenants/nobody/pause", 404, "no tenant &#39;nobody&#39;"),
        ("/console/tenants/Not_A_Tenant/pause", 400, "is not a tenant name"),
        (
            "/console/tenants/acme/delete",
            400,
            "a tenant is paused or resumed, not &#39;delete&#39;",
        ),
    ],
)
def test_bad_tenants_and_actions_are_error_pages_that_change_nothing(
    local: Api, path: str, status: int, says: str
) -> None:
    for answer in (
        local.client.get(path),
        local.client.post(path, data={"reason": "x"}, headers=SAME_SITE),
    ):
        assert answer.status_code == status
        assert 'id="error"' in text(answer) and says in text(answer)
    assert local.harness.store.tenant_states() == []  # nothing paused, nothing recorded


def test_a_pause_without_a_reason_is_refused_and_changes_nothing(local: Api) -> None:
    for reason in ({}, {"reason": "   "}):
        refused = local.client.post("/console/tenants/acme/pause", data=reason, headers=SAME_SITE)
        assert refused.status_code == 400
        assert "reason is required: say why" in text(refused)
    assert local.harness.store.tenant_states() == []


def test_a_pause_form_from_another_site_is_refused(local: Api) -> None:
    refused = local.client.post(
        "/console/tenants/acme/pause",
        data={"reason": "csrf"},
        headers={"Origin": "https://evil.example"},
    )
    assert refused.status_code == 403
    assert local.harness.store.tenant_states() == []


def test_a_viewer_sees_the_tenants_without_buttons_and_is_refused_a_pause(cloud: Api) -> None:
    page = text(cloud.client.get("/console/tenants", headers=token(VIEWER)))
    assert set(rows(page)) == {"acme", "default", "frozen", "globex"}
    assert "Pause…" not in page and "Resume…" not in page
    refused = cloud.client.get("/console/tenants/acme/pause", headers=token(VIEWER))
    assert refused.status_code == 403
    assert "is a viewer and may not pause or resume tenants" in text(refused)


def test_a_scoped_caller_sees_and_pauses_its_own_tenants_only(cloud: Api) -> None:
    page = text(cloud.client.get("/console/tenants", headers=token(ACME_OPERATOR)))
    assert set(rows(page)) == {"acme"}
    # another tenant is unknown to it, as one that does not exist
    for path in ("/console/tenants/globex/pause", "/console/tenants/default/pause"):
        other = cloud.client.post(
            path, data={"reason": "x"}, headers={**token(ACME_OPERATOR), **SAME_SITE}
        )
        assert other.status_code == 404 and "no tenant" in text(other)
    assert cloud.harness.store.tenant_states() == []
    mine = cloud.client.post(
        "/console/tenants/acme/pause",
        data={"reason": "drill"},
        headers={**token(ACME_OPERATOR), **SAME_SITE},
    )
    assert mine.status_code == 303
    assert cloud.harness.store.tenant_state("acme").by == ACME_OPERATOR
    both = text(cloud.client.get("/console/tenants", headers=token(TWO_TENANTS)))
    assert set(rows(both)) == {"acme", "globex"}


def test_the_flow_lists_tenant_filter_keeps_to_the_callers_tenants(cloud: Api) -> None:
    for tenant in ("acme", "globex", "default"):
        cloud.harness.start("demo", {}, flow_id=f"{tenant}-1", tenant=tenant)

    def listed(path: str, caller: str) -> tuple[list[str], str]:
        page = text(cloud.client.get(path, headers=token(caller)))
        return re.findall(r'data-flow-id="([^"]+)"', page), page

    # unscoped: any tenant, or all; the field is free text
    everyone, page = listed("/console/flows", VIEWER)
    assert sorted(everyone) == ["acme-1", "default-1", "globex-1"]
    assert '<input name="tenant" id="tenant-filter" value=""' in page
    assert listed("/console/flows?tenant=globex", VIEWER)[0] == ["globex-1"]
    # scoped to two: the first one's flows unless it names the other, chosen from a list
    first, page = listed("/console/flows", TWO_TENANTS)
    assert first == ["acme-1"]
    (field,) = re.findall(r'<select name="tenant" id="tenant-filter">(.*?)</select>', page, re.S)
    options = re.findall(r'<option value="(\w+)" ?(selected)?>', field)
    assert options == [("acme", "selected"), ("globex", "")]
    assert listed("/console/flows?tenant=globex", TWO_TENANTS)[0] == ["globex-1"]
    # a tenant not its own is refused, saying so
    refused = cloud.client.get("/console/flows?tenant=default", headers=token(TWO_TENANTS))
    assert refused.status_code == 403
    assert "may not see tenant &#39;default&#39;" in text(refused)
