"""The api's schedules routes in process: a viewer lists them (next ticks, last runs with
status), an operator pauses, resumes and triggers them with a reason recorded, a viewer may
not, a tenant-scoped caller may not even read them, and an unknown name is a 404."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relayflow import ActionStep, Flow, Registry, Schedule
from relayflow.metrics import Metrics
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.operations import Operations

from .test_api import OPERATOR, VIEWER, FakeDeadLetters, token, verifier

SCOPED = "acme-ops@example.com"
FLOW = Flow(name="reconcile", steps=(ActionStep("work", lambda ctx: {"ok": True}),))
REGISTRY = Registry(
    (FLOW,), schedules=(Schedule("nightly", "reconcile", "0 2 * * *", timezone="Europe/Berlin"),)
)


@pytest.fixture
def api() -> tuple[Harness, Any]:
    h = Harness(REGISTRY, start=datetime(2026, 12, 3, tzinfo=UTC))
    tokens = verifier(VIEWER, OPERATOR, SCOPED)
    access = Access(
        verifier=tokens,
        viewers=frozenset({VIEWER}),
        operators=frozenset({OPERATOR, SCOPED}),
        scopes={SCOPED: frozenset({"acme"})},
    )
    ops = Operations(
        engine=h.engine,
        store=h.store,
        access=access,
        dead_letters=FakeDeadLetters(),
        counters=Counters(),
        metrics=Metrics(),
        registry=REGISTRY,
        scheduler=h.scheduler,
    )
    return h, build_api(ops).test_client()


def test_a_viewer_lists_schedules_with_next_ticks_and_last_runs(api: tuple[Harness, Any]) -> None:
    h, client = api
    h.run_until(h.now + timedelta(days=1))
    response = client.get("/schedules", headers=token(VIEWER))
    assert response.status_code == 200
    (shown,) = response.get_json()["schedules"]
    assert shown["next_ticks"][0] == {
        "local": "2026-12-04T02:00:00+01:00",
        "utc": "2026-12-04T01:00:00+00:00",
    }
    assert shown["runs"][0]["flow_id"] == "sched-nightly-20261203T0100Z"
    assert shown["runs"][0]["status"] == "SUCCEEDED"


def test_an_operator_pauses_resumes_and_triggers_with_a_reason(api: tuple[Harness, Any]) -> None:
    h, client = api
    paused = client.post(
        "/schedules/nightly:pause", headers=token(OPERATOR), json={"reason": "migration"}
    )
    assert paused.get_json() == {
        "schedule": "nightly",
        "paused": True,
        "by": OPERATOR,
        "reason": "migration",
    }
    h.advance(86400)
    assert h.started_by("nightly") == []
    resumed = client.post(
        "/schedules/nightly:resume", headers=token(OPERATOR), json={"reason": "done"}
    )
    assert resumed.get_json()["paused"] is False
    triggered = client.post(
        "/schedules/nightly:trigger", headers=token(OPERATOR), json={"reason": "by hand"}
    )
    assert triggered.status_code == 200
    assert triggered.get_json()["flow_id"] == "sched-nightly-manual-20261204T000000Z"
    assert triggered.get_json()["outcome"] == "started"
    assert h.schedule("nightly").runs[0].by == OPERATOR


def test_a_trigger_may_name_its_flow_id(api: tuple[Harness, Any]) -> None:
    h, client = api
    body = {"reason": "rerun", "flow_id": "rerun-2026-12-03"}
    done = client.post("/schedules/nightly:trigger", headers=token(OPERATOR), json=body)
    assert done.status_code == 200
    assert h.flow("rerun-2026-12-03").flow == "reconcile"
    body["flow_id"] = "__bad__"
    response = client.post("/schedules/nightly:trigger", headers=token(OPERATOR), json=body)
    assert response.status_code == 400


def test_a_viewer_may_not_pause_and_a_reason_is_required(api: tuple[Harness, Any]) -> None:
    h, client = api
    refused = client.post("/schedules/nightly:pause", headers=token(VIEWER), json={"reason": "x"})
    assert refused.status_code == 403
    missing = client.post("/schedules/nightly:pause", headers=token(OPERATOR), json={})
    assert missing.status_code == 400
    assert not h.schedule("nightly").paused


def test_a_tenant_scoped_caller_may_not_read_or_operate_schedules(
    api: tuple[Harness, Any],
) -> None:
    _, client = api
    assert client.get("/schedules", headers=token(SCOPED)).status_code == 403
    body = {"reason": "x"}
    assert (
        client.post("/schedules/nightly:pause", headers=token(SCOPED), json=body).status_code == 403
    )


def test_an_unknown_schedule_is_a_404_naming_those_deployed(api: tuple[Harness, Any]) -> None:
    _, client = api
    response = client.post("/schedules/weekly:pause", headers=token(OPERATOR), json={"reason": "x"})
    assert response.status_code == 404
    assert (
        "unknown schedule 'weekly' (deployed: nightly)" in response.get_json()["error"]["message"]
    )
    bad = client.post("/schedules/No%20Such:pause", headers=token(OPERATOR), json={"reason": "x"})
    assert bad.status_code == 400
