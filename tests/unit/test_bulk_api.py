"""The api's bulk actions in process: the dry run (counts, per-flow previews a page at a time,
nothing changed), the run and its progress, operator-only changes, scoping, and clear 400s
for a bad body. Flows run in memory (relayflow.testing.Harness); tokens are real RS256 JWTs
as in tests/unit/test_api.py."""

from __future__ import annotations

from typing import Any

import pytest

from relayflow.core.state import Status
from relayflow.metrics import Metrics
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.operations import Operations
from tests.unit.test_api import (
    FLOW,
    OPERATOR,
    VIEWER,
    FakeDeadLetters,
    message,
    token,
    verifier,
)

SCOPED = "acme-ops@example.com"


def failed_demo_flows() -> Harness:
    """Three demo flows failed (refused at their first try, as ``bad`` inputs are), one
    running, and one of tenant acme failed."""
    h = Harness(FLOW)
    for i in range(3):
        h.start("demo", {"bad": True}, flow_id=f"bad-{i}")
    h.start("demo", {"bad": True}, flow_id="acme-bad", tenant="acme")
    h.start("demo", {}, flow_id="fine")
    for _ in range(12):
        h.deliver_next()
    return h


@pytest.fixture
def h() -> Harness:
    return failed_demo_flows()


def api_of(h: Harness, access: Access) -> Any:
    """The api (and its console) over ``h``'s engine, store and bulk actions."""
    ops = Operations(
        engine=h.engine,
        store=h.store,
        access=access,
        dead_letters=FakeDeadLetters(),
        counters=Counters(),
        metrics=Metrics(),
        bulk=h.bulk_runner,
    )
    return build_api(ops).test_client()


def client(h: Harness) -> Any:
    tokens = verifier(VIEWER, OPERATOR, SCOPED)
    access = Access(
        verifier=tokens,
        viewers=frozenset({VIEWER}),
        operators=frozenset({OPERATOR, SCOPED}),
        scopes={SCOPED: frozenset({"acme"})},
    )
    return api_of(h, access)


def dry_run(api: Any, who: str = OPERATOR, **body: Any) -> Any:
    """A dry run of a retry of the default tenant's failed flows (``body`` says otherwise)."""
    failed = {"status": "FAILED", "tenant": "default"}
    wanted = {"action": "retry", "filter": failed, "reason": "fixed", **body}
    return api.post("/bulk", headers=token(who), json=wanted)


def test_a_dry_run_stores_what_would_happen_and_changes_no_flow(h: Harness) -> None:
    api = client(h)
    before = {f: h.flow(f).model_dump() for f in ("bad-0", "bad-1", "bad-2", "fine")}

    response = dry_run(api, filter={"status": "failed", "flow": "demo", "tenant": "default"})

    assert response.status_code == 200, response.get_data(as_text=True)
    made = response.get_json()
    assert (made["state"], made["action"], made["matched"], made["allowed"]) == (
        "previewed",
        "retry",
        3,
        3,
    )
    assert made["filter"] == {"flow": "demo", "status": "FAILED", "tenant": "default"}
    assert (made["by"], made["reason"], made["rate_per_s"]) == (OPERATOR, "fixed", 5.0)
    rows = {row["flow_id"]: row for row in made["previews"]}
    assert set(rows) == {"bad-0", "bad-1", "bad-2"}
    assert rows["bad-0"]["rerun"] == ["reserve", "await_ready"]
    assert rows["bad-0"]["status"] == "FAILED" and rows["bad-0"]["outcome"] is None
    assert {f: h.flow(f).model_dump() for f in before} == before

    page = api.get(f"/bulk/{made['id']}/previews?page=0", headers=token(VIEWER)).get_json()
    assert [r["flow_id"] for r in page["previews"]] == [r["flow_id"] for r in made["previews"]]
    assert (page["pages"], page["next_page"]) == (1, None)
    listed = api.get("/bulk", headers=token(VIEWER)).get_json()["bulk"]
    assert [b["id"] for b in listed] == [made["id"]]


def test_running_it_retries_each_flow_once_and_reports_progress(h: Harness) -> None:
    api = client(h)
    made = dry_run(api).get_json()

    ran = api.post(f"/bulk/{made['id']}:run", headers=token(OPERATOR), json={})
    assert ran.status_code == 200 and ran.get_json()["state"] == "running"
    h.run_bulk(made["id"])

    shown = api.get(f"/bulk/{made['id']}", headers=token(VIEWER)).get_json()
    assert (shown["state"], shown["done"], shown["remaining"], shown["progress"]) == (
        "done",
        3,
        0,
        1.0,
    )
    assert shown["run_by"] == OPERATOR and shown["eta_s"] is None
    for flow_id in ("bad-0", "bad-1", "bad-2"):
        (entry,) = [e for e in h.flow(flow_id).history if e.bulk == made["id"]]
        assert entry.by == OPERATOR
    page = api.get(f"/bulk/{made['id']}/previews", headers=token(VIEWER)).get_json()
    assert {row["outcome"] for row in page["previews"]} == {"done"}
    again = api.post(f"/bulk/{made['id']}:run", headers=token(OPERATOR), json={})
    assert again.status_code == 409
    assert "is done: only a previewed one can run" in message(again)


def test_without_a_dry_run_it_runs_at_once(h: Harness) -> None:
    made = dry_run(client(h), dry_run=False).get_json()
    assert made["state"] == "running" and made["run_by"] == OPERATOR
    assert h.run_bulk(made["id"]).done == 3


def test_a_viewer_may_not_make_or_run_a_bulk_action(h: Harness) -> None:
    api = client(h)
    refused = dry_run(api, who=VIEWER)
    assert refused.status_code == 403
    assert "may not make bulk actions" in message(refused)
    made = dry_run(api).get_json()
    ran = api.post(f"/bulk/{made['id']}:run", headers=token(VIEWER), json={})
    assert ran.status_code == 403
    assert h.bulk_runner.get(made["id"]).state.value == "previewed"


def test_a_caller_scoped_to_a_tenant_acts_on_its_flows_and_sees_its_bulk_actions(
    h: Harness,
) -> None:
    api = client(h)
    everyone = dry_run(api, filter={"status": "FAILED"}).get_json()
    assert everyone["matched"] == 4  # every tenant's
    scoped = dry_run(api, who=SCOPED, filter={"status": "FAILED"})
    assert scoped.status_code == 200
    made = scoped.get_json()
    assert made["filter"]["tenant"] == "acme" and made["matched"] == 1
    assert api.get(f"/bulk/{everyone['id']}", headers=token(SCOPED)).status_code == 404
    listed = api.get("/bulk", headers=token(SCOPED)).get_json()["bulk"]
    assert [b["id"] for b in listed] == [made["id"]]
    other = dry_run(api, who=SCOPED, filter={"status": "FAILED", "tenant": "default"})
    assert other.status_code == 403


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"action": "delete"}, "action must be one of retry, cancel, reset, not 'delete'"),
        ({"action": "reset"}, "step is required: the step of the flow to reset to"),
        ({"action": "reset", "step": "Bad Step"}, "step must be a step name"),
        ({"action": "reset", "step": "reserve", "undo": "no"}, "undo must be true or false"),
        ({"step": "reserve"}, "step and undo are a reset's; a retry takes neither"),
        ({"filter": {"label": "no-equals"}}, "label: "),
        ({"filter": {"dependency": "Not A Dep"}}, "dependency 'Not A Dep' is not a dependency"),
        ({"filter": {}}, "filter: name at least one"),
        ({"filter": {"colour": "red"}}, "filter: no filter 'colour' (filters: flow, status,"),
        ({"filter": {"status": "BROKEN"}}, "status 'BROKEN' is not one of"),
        ({"filter": ["FAILED"]}, "filter must be a JSON object"),
        ({"reason": ""}, "reason is required"),
        ({"rate_per_s": 0}, "rate_per_s must be 0.01..50 flows a second"),
        ({"rate_per_s": "fast"}, "rate_per_s must be 0.01..50 flows a second"),
        ({"rate_per_s": True}, "rate_per_s must be a number"),
        ({"dry_run": "maybe"}, "dry_run must be true or false"),
    ],
)
def test_a_bad_body_is_a_400_that_says_what_is_wrong(
    h: Harness, body: dict[str, Any], said: str
) -> None:
    response = dry_run(client(h), **body)
    assert response.status_code == 400, response.get_data(as_text=True)
    assert said in message(response)
    assert not h.bulk_store.actions


def test_an_unknown_or_malformed_bulk_id_is_a_404_or_a_400(h: Harness) -> None:
    api = client(h)
    assert api.get("/bulk/bulk-000000000000", headers=token(VIEWER)).status_code == 404
    assert api.get("/bulk/nope", headers=token(VIEWER)).status_code == 400
    made = dry_run(api).get_json()
    page = api.get(f"/bulk/{made['id']}/previews?page=3", headers=token(VIEWER))
    assert page.status_code == 400 and "page must be 0..0" in message(page)


def test_an_operator_cancels_a_bulk_action_saying_why(h: Harness) -> None:
    api = client(h)
    made = dry_run(api).get_json()
    no_reason = api.post(f"/bulk/{made['id']}:cancel", headers=token(OPERATOR), json={})
    assert no_reason.status_code == 400
    cancelled = api.post(
        f"/bulk/{made['id']}:cancel", headers=token(OPERATOR), json={"reason": "wrong filter"}
    ).get_json()
    assert cancelled["state"] == "cancelled"
    assert cancelled["log"][-1]["reason"] == "wrong filter"
    assert {h.flow(f"bad-{i}").status for i in range(3)} == {Status.FAILED}


def test_a_filter_by_code_and_labels_and_a_bulk_reset_to_a_step(h: Harness) -> None:
    api = client(h)
    h.start("demo", {"bad": True}, flow_id="tagged", labels={"team": "a", "region": "eu"})
    for _ in range(6):
        h.deliver_next()

    tagged = dry_run(api, filter={"label": ["team=a", "region=eu"], "code": "REFUSED"})
    by_code = dry_run(api, filter={"code": "REFUSED", "tenant": "default"})
    reset = dry_run(api, action="reset", step="reserve", undo=False)

    assert tagged.status_code == 200, tagged.get_data(as_text=True)
    made = tagged.get_json()
    assert [r["flow_id"] for r in made["previews"]] == ["tagged"]
    assert made["filter"] == {"labels": ["team=a", "region=eu"], "code": "REFUSED"}
    assert by_code.get_json()["matched"] == 4
    shown = reset.get_json()
    assert (shown["action"], shown["step"], shown["undo"], shown["allowed"]) == (
        "reset",
        "reserve",
        False,
        4,
    )
    assert {r["detail"]["step"] for r in shown["previews"]} == {"reserve"}
