"""The console's breakers page in process: an opened breaker with its state, its failure rate
against the rate that opens it, its retry budget and its transitions; a closed one with none;
the flows it holds up, of the reader's tenants; viewers and scoped viewers read it, a completer
may not."""

from __future__ import annotations

import re

from flask.testing import FlaskClient

from relayflow.core.breaker_state import Breaker
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api

from .test_api import COMPLETER, VIEWER, operations, token, verifier
from .test_breakers import DEP, harness_with, open_from_elsewhere
from .test_console import text

SCOPED = "acme-vi@example.com"


def console(h: Harness, access: Access) -> FlaskClient:
    return build_api(operations(h, access)).test_client()


def row(page: str, dependency: str) -> str:
    (found,) = re.findall(
        rf'<tr class="breaker-row" data-dependency="{dependency}".*?</tr>', page, re.S
    )
    return str(found)


def test_an_opened_breaker_shows_its_state_failure_rate_budget_and_transition() -> None:
    # given the dependency failed every call another instance made (4: its min_calls)
    h, _ = harness_with(api_down_s=60)
    open_from_elsewhere(h)
    assert h.breaker(DEP).state is Breaker.OPEN
    # and a flow whose step calling it is put off
    held = h.start("sync", {})
    h.deliver_next(held)
    assert (h.flow(held).history[-1].outcome, h.flow(held).dependency) == ("deferred", DEP)

    page = text(console(h, Access(verifier=None)).get("/console/breakers"))

    shown = row(page, DEP)
    assert 'data-state="open" data-calls="4" data-failures="4"' in shown
    assert '<span class="badge state-open">open</span>' in shown
    assert re.search(r"probes from \d\d-\d\d \d\d:\d\d:\d\d", shown)
    assert '<strong class="pct">100 %</strong>' in shown
    assert "4 of 4 calls failed in the last 30 s" in shown
    assert "opens at ≥ 50 % of ≥ 4 calls" in shown  # the dependency's policy (test_breakers)
    assert "<strong>0 / 3</strong> retries" in shown  # 0.5 x 4 first attempts + 1
    (transition,) = re.findall(r'<li class="transition" data-to="(\w+)">.*?</li>', shown, re.S)
    assert transition == "open"
    assert "4 of 4 calls failed in 1s (≥ 50%)" in shown  # why it opened
    assert 'href="/console/flows?dependency=client-api"' in shown  # the flows it holds up
    assert re.search(r'<td class="num held-up">.*>1 flow</a>', shown)
    assert 'href="/console/breakers" class="here">Breakers</a>' in page


def test_a_breaker_never_opened_is_closed_with_no_transitions() -> None:
    h, _ = harness_with(api_down_s=0)
    page = text(console(h, Access(verifier=None)).get("/console/breakers"))
    shown = row(page, DEP)  # named by the flow's step: shown before any call
    assert 'data-state="closed" data-calls="0"' in shown
    assert '<strong class="pct">-</strong>' in shown
    assert "none yet: it has always been closed" in shown
    assert re.search(r'<td class="num held-up">.*>0 flows</a>', shown)


def test_viewers_read_the_breakers_and_a_completer_may_not() -> None:
    h, _ = harness_with(api_down_s=60)
    open_from_elsewhere(h)
    h.deliver_next(h.start("sync", {}))  # the default tenant's flow, put off
    access = Access(
        verifier=verifier(VIEWER, SCOPED, COMPLETER),
        viewers=frozenset({VIEWER, SCOPED}),
        completers=frozenset({COMPLETER}),
        scopes={SCOPED: frozenset({"acme"})},
    )
    client = console(h, access)
    held_up = {}
    for reader in (VIEWER, SCOPED):  # dependencies belong to no tenant: as GET /breakers
        page = client.get("/console/breakers", headers=token(reader))
        assert page.status_code == 200 and f'data-dependency="{DEP}"' in text(page)
        held_up[reader] = re.findall(r'<td class="num held-up">.*?>(\d+) flows?</a>', text(page))
    # but the flows a breaker holds up are counted in the reader's tenants only
    assert held_up == {VIEWER: ["1"], SCOPED: ["0"]}
    refused = client.get("/console/breakers", headers=token(COMPLETER))
    assert refused.status_code == 403 and "may not read breakers" in text(refused)
