"""The client API's breaker on the console, in a real browser against the local stack: failures
open it, and the breakers page shows its state, failure rate, retry budget and the transition
with why; once the client API is back it closes, and the page says so."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from relayflow.local.polling import poll_until

from .conftest import Console
from .test_console_browser import new_id, start

pytestmark = pytest.mark.e2e

DEPENDENCY = "client-api"  # the reference flow's steps name it


def breaker(console: Console) -> dict[str, Any]:
    """The breaker as the api shows it."""
    shown = requests.get(console.url("/breakers"), timeout=10).json()["breakers"]
    (found,) = [b for b in shown if b["dependency"] == DEPENDENCY]
    return dict(found)


def breaker_row(console: Console) -> WebElement:
    console.open("/console/breakers")
    selector = f'tr.breaker-row[data-dependency="{DEPENDENCY}"]'
    return console.driver.find_element(By.CSS_SELECTOR, selector)


def test_a_breaker_opened_by_failures_shows_its_rate_budget_and_transitions(
    console: Console,
) -> None:
    # given ten flows whose polls of their registration all fail (503), and five of whose
    # registrations fail once (retried within the retry budget, 10 + 0.2 a first attempt: a
    # retry beyond it would wait for the window to move on, 30 s); twenty failed calls (the
    # default min_calls) open the breaker within about two seconds
    faults = [
        {"method": "POST", "path_prefix": "/registrations", "status": 503, "count": 5},
        {"method": "GET", "path_prefix": "/registrations", "status": 503, "count": None},
    ]
    console.h.client_api("POST", "/admin/faults", json=faults)
    ids = [new_id("breaker") for _ in range(10)]
    for flow_id in ids:
        start(console, flow_id)

    # when the breaker has opened, and the poller has added the failed polls that opened it
    # to its shared window (each instance adds its counts every 2 s or so, with a call it
    # records: the window is a sample), and the breakers page is open
    def opened() -> bool:
        found = breaker(console)
        return found["state"] != "closed" and found["failures"] >= 10

    assert poll_until(opened, timeout_s=30)
    row = breaker_row(console)

    # then it shows it open (or probing: it may half-open after its second), why it opened,
    # how many of its window's calls failed against the rate that opens it, and its retries
    # against their budget
    assert row.get_attribute("data-state") in ("open", "half_open")
    opens = row.find_elements(By.CSS_SELECTOR, 'li.transition[data-to="open"]')
    whys = [li.get_attribute("textContent") or "" for li in opens]  # the earlier ones folded
    assert [w for w in whys if "calls failed in" in w and "(≥ 50%)" in w], whys
    calls, failures = (int(row.get_attribute(f"data-{n}") or 0) for n in ("calls", "failures"))
    rate = row.find_element(By.CSS_SELECTOR, "td.rate").text
    assert f"{failures / calls:.0%}".replace("%", " %") in rate
    assert f"{failures} of {calls} calls failed in the last 30 s" in rate
    assert "opens at ≥ 50 % of ≥ 20 calls" in rate
    assert budget_shown(row) == (int(row.get_attribute("data-retries") or 0), 0.2, 10)
    # and the flows it holds up: polls put off, linked to the list of them
    held = row.find_element(By.CSS_SELECTOR, "td.held-up a")
    assert int(held.text.split()[0]) >= 1, held.text
    assert (held.get_attribute("href") or "").endswith(f"/console/flows?dependency={DEPENDENCY}")
    console.screenshot("console-breakers.png")

    # when the client API is back, then the flows end, the breaker closes, and the page says
    # so, newest first
    console.h.client_api("DELETE", "/admin/faults")
    for flow_id in ids:
        console.h.wait_terminal(flow_id)
    assert poll_until(lambda: breaker(console)["state"] == "closed", timeout_s=30)
    row = breaker_row(console)
    assert row.get_attribute("data-state") == "closed"
    newest = row.find_element(By.CSS_SELECTOR, "li.transition")
    assert newest.get_attribute("data-to") == "closed"
    assert "probes succeeded" in newest.text


def budget_shown(row: WebElement) -> tuple[int, float, int]:
    """The retry budget as the row shows it: retries spent (checked against what it says is
    allowed: its share of the first attempts, plus its floor), the share, the floor."""
    text = row.find_element(By.CSS_SELECTOR, "td.budget").text
    found = re.search(r"(\d+) / (\d+) retries\s+([\d.]+) . (\d+) first attempts \+ (\d+)", text)
    assert found, text
    spent, allowed, share, first, floor = found.groups()
    assert int(allowed) == round(float(share) * int(first) + int(floor))
    budget = float(row.get_attribute("data-budget") or 0)
    assert budget == pytest.approx(float(share) * int(first) + int(floor))
    return int(spent), float(share), int(floor)
