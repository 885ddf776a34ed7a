"""The console's schedules page in process: next ticks and last runs linked to their flows,
and pause, resume and trigger behind a confirmation that asks why; viewers get no buttons,
and a form from another site is refused."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from flask.testing import FlaskClient

from relayflow import ActionStep, Flow, Registry, Schedule
from relayflow.metrics import Metrics
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.operations import Operations

from .test_api import FakeDeadLetters
from .test_console import SAME_SITE, text

FLOW = Flow(name="reconcile", steps=(ActionStep("work", lambda ctx: {"ok": True}),))
REGISTRY = Registry(
    (FLOW,), schedules=(Schedule("nightly", "reconcile", "0 2 * * *", timezone="Europe/Berlin"),)
)


def console(access: Access) -> tuple[Harness, FlaskClient]:
    h = Harness(REGISTRY, start=datetime(2026, 12, 3, tzinfo=UTC))
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


@pytest.fixture
def local() -> tuple[Harness, FlaskClient]:
    return console(Access(verifier=None))  # the local stack: everyone is an operator


def test_the_page_shows_next_ticks_and_runs_linked_to_their_flows(
    local: tuple[Harness, FlaskClient],
) -> None:
    h, client = local
    h.run_until(h.now + timedelta(days=1))
    page = text(client.get("/console/schedules"))
    assert 'data-name="nightly"' in page and "<code>0 2 * * *</code><br>Europe/Berlin" in page
    assert '2026-12-04T02:00:00+01:00<br><span class="muted">2026-12-04T01:00:00+00:00' in page
    assert '<a href="/console/flows/sched-nightly-20261203T0100Z">' in page
    assert re.search(r'id="pause-nightly" href="/console/schedules/nightly/pause"', page)


def test_pause_asks_why_then_records_who_and_why_and_resume_undoes_it(
    local: tuple[Harness, FlaskClient],
) -> None:
    h, client = local
    confirm = text(client.get("/console/schedules/nightly/pause"))
    assert "Pause nightly?" in confirm and 'name="reason"' in confirm
    no_reason = client.post("/console/schedules/nightly/pause", data={}, headers=SAME_SITE)
    assert no_reason.status_code == 400 and not h.schedule("nightly").paused
    done = client.post(
        "/console/schedules/nightly/pause", data={"reason": "migration"}, headers=SAME_SITE
    )
    assert done.status_code == 303
    assert done.headers["Location"].endswith("/console/schedules?notice=pause")
    assert (h.schedule("nightly").paused, h.schedule("nightly").reason) == (True, "migration")
    page = text(client.get("/console/schedules?notice=pause"))
    assert "Pause recorded" in page and 'id="resume-nightly"' in page
    client.post("/console/schedules/nightly/resume", data={"reason": "done"}, headers=SAME_SITE)
    assert not h.schedule("nightly").paused


def test_trigger_starts_a_manual_run_and_links_it(local: tuple[Harness, FlaskClient]) -> None:
    h, client = local
    done = client.post(
        "/console/schedules/nightly/trigger", data={"reason": "by hand"}, headers=SAME_SITE
    )
    assert done.status_code == 303
    assert "started=sched-nightly-manual-20261203T000000Z" in done.headers["Location"]
    assert h.started_by("nightly") == ["sched-nightly-manual-20261203T000000Z"]


def test_a_form_from_another_site_is_refused(local: tuple[Harness, FlaskClient]) -> None:
    h, client = local
    refused = client.post(
        "/console/schedules/nightly/pause",
        data={"reason": "csrf"},
        headers={"Origin": "https://evil.example"},
    )
    assert refused.status_code == 403 and not h.schedule("nightly").paused


def test_an_unknown_action_or_schedule_is_an_error_page(
    local: tuple[Harness, FlaskClient],
) -> None:
    _, client = local
    assert client.get("/console/schedules/nightly/delete").status_code == 400
    assert client.get("/console/schedules/weekly/pause").status_code == 404
