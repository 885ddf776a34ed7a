"""A sleeping flow as people see it: ``relayflow status`` (cli.render), the api's
``GET /flows/{id}`` and the console's flow page say when it wakes, and ``relayflow graph``
draws the sleep."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from relayflow import ActionStep, Flow, Registry, Sleep, StepContext
from relayflow.cli import render, shapes
from relayflow.core.flows import ForEach
from relayflow.metrics import Metrics
from relayflow.telemetry import Counters
from relayflow.testing import START, Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.guard import RequestGuard
from relayflow.web.operations import Operations

from .test_api import FakeDeadLetters

WAKE = START + timedelta(hours=2)


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


NAP = Flow(
    name="nap",
    steps=(ActionStep("order", noop), Sleep("cool_off", seconds=7200), ActionStep("remind", noop)),
)


def sleeping() -> tuple[Harness, Any]:
    h = Harness(NAP)
    h.start("nap", flow_id="n-1")
    h.run_until(START + timedelta(minutes=10))
    ops = Operations(
        engine=h.engine,
        store=h.store,
        access=Access(verifier=None),
        dead_letters=FakeDeadLetters(),
        counters=Counters(),
        metrics=Metrics(),
        registry=Registry((NAP,)),
        guard=RequestGuard(),
    )
    return h, build_api(ops).test_client()


def test_status_says_when_the_sleep_wakes() -> None:
    h, _ = sleeping()
    doc = json.loads(h.flow("n-1").model_dump_json())
    shown = render.flow(doc)
    assert f"sleeping until {WAKE.isoformat()}" in shown
    assert "position  cool_off sleep hop 1" in shown
    assert "hop 0" in shown and "sleeping until" in shown  # the history entry


def test_the_api_shows_the_wake_time_on_the_steps_track_and_as_the_next_run() -> None:
    _, client = sleeping()
    body = client.get("/flows/n-1").get_json()
    assert body["status"] == "RUNNING"
    assert body["tracks"]["cool_off"]["wake_at"].startswith("2030-01-01T02:00:00")
    assert body["next_run_at"].startswith("2030-01-01T02:00:00")
    assert body["position"] == {**body["position"], "kind": "sleep", "poll": 1}


def test_the_console_shows_the_sleep_and_draws_its_wait() -> None:
    _, client = sleeping()
    page = client.get("/console/flows/n-1").get_data(as_text=True)
    (shown,) = re.findall(r'<dd class="sleeping" id="sleeping-cool_off">([^<]*)</dd>', page)
    assert shown.startswith("cool_off until 2030-01-01 02:00:00")
    assert 'data-kind="sleep" data-step="cool_off"' in page
    assert "cool_off sleep hop 1" in page


def test_the_graph_draws_the_sleep() -> None:
    assert "cool_off  <- order   [sleep 7200s]" in shapes.render(NAP, mermaid=False)
    each = Flow(
        name="drip",
        steps=(ForEach("each", items=lambda ctx: [], steps=(Sleep("wait", seconds=60),)),),
    )
    assert "[sleep 60s]" in shapes.render(each, mermaid=False)
