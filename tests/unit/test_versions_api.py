"""``GET /versions`` (relayflow.web.versions) and the console's versions panel: each version
the deployed app registers with the flows not ended on it, one flow's, one version's
(registered or not), for viewers who see every tenant; clear 400s and 404s."""

from __future__ import annotations

import re

import pytest

from relayflow.core.tenants import TenantPolicy, Tenants
from relayflow.web.access import Access

from .test_api import (
    OPERATOR,
    VIEWER,
    Api,
    build,
    message,
    token,
    verifier,
)

SCOPED = "acme-vi@example.com"


@pytest.fixture
def api() -> Api:
    tokens = verifier(VIEWER, OPERATOR, SCOPED)
    access = Access(
        verifier=tokens,
        viewers=frozenset({VIEWER, SCOPED}),
        operators=frozenset({OPERATOR}),
        scopes={SCOPED: frozenset({"acme"})},
    )
    return build(access, tenants=Tenants(tenants={"acme": TenantPolicy()}))


def test_each_registered_version_comes_with_the_flows_not_ended_on_it(api: Api) -> None:
    api.harness.start("wait", {}, flow_id="w-1")
    api.harness.deliver_next("w-1")  # waits for its callback: RUNNING
    api.running_flow("f-0")
    api.harness.cancel("f-0")
    api.harness.run("f-0")  # CANCELLED: ended, not counted
    api.running_flow("f-1")  # demo: polling, RUNNING
    api.running_flow("f-2")
    api.harness.cancel("f-2")  # its reserve not undone yet: COMPENSATING
    api.harness.start("demo", {}, flow_id="f-3")  # PENDING

    shown = api.client.get("/versions", headers=token(VIEWER))

    assert shown.status_code == 200, shown.get_data(as_text=True)
    assert shown.get_json()["versions"] == [
        {
            "flow": "demo",
            "version": 1,
            "registered": True,
            "newest": True,
            "running": {"PENDING": 1, "RUNNING": 1, "COMPENSATING": 1},
            "total": 3,
        },
        {
            "flow": "wait",
            "version": 1,
            "registered": True,
            "newest": True,
            "running": {"PENDING": 0, "RUNNING": 1, "COMPENSATING": 0},
            "total": 1,
        },
    ]


def test_one_flows_versions_and_one_version_registered_or_not(api: Api) -> None:
    api.running_flow("f-1")
    (demo,) = api.client.get("/versions?flow=demo", headers=token(VIEWER)).get_json()["versions"]
    assert (demo["flow"], demo["total"]) == ("demo", 1)
    (gone,) = api.client.get("/versions?flow=demo&version=7", headers=token(VIEWER)).get_json()[
        "versions"
    ]
    assert (gone["registered"], gone["newest"], gone["total"]) == (False, False, 0)


@pytest.mark.parametrize(
    ("query", "status", "says"),
    [
        ("flow=nope", 404, "no flow is named 'nope'; the flows are demo, wait"),
        ("version=1", 400, "version needs flow"),
        ("flow=demo&version=0", 400, "version must be an integer 1..1000000"),
        ("flow=Demo!", 400, "is not a flow name"),
    ],
)
def test_a_bad_question_is_answered_with_what_is_wrong(
    api: Api, query: str, status: int, says: str
) -> None:
    answer = api.client.get(f"/versions?{query}", headers=token(VIEWER))
    assert answer.status_code == status
    assert says in message(answer)


def test_counts_span_tenants_so_a_scoped_caller_may_not_read_them(api: Api) -> None:
    refused = api.client.get("/versions", headers=token(SCOPED))
    assert refused.status_code == 403
    assert "scoped to tenants" in message(refused)
    assert api.client.get("/versions").status_code == 401


def test_the_definitions_page_shows_the_flows_not_ended_on_each_version(api: Api) -> None:
    api.running_flow("f-1")
    page = api.client.get("/console/definitions", headers=token(VIEWER)).get_data(as_text=True)
    rows = re.findall(r'<tr data-flow="(\w+)" data-version="(\d+)" data-total="(\d+)">', page)
    assert rows == [("demo", "1", "1"), ("wait", "1", "0")]
    assert "/console/flows?flow=demo&amp;version=1&amp;status=RUNNING" in page
    scoped = api.client.get("/console/definitions", headers=token(SCOPED)).get_data(as_text=True)
    assert "data-total" not in scoped and "def-demo-v1" in scoped
