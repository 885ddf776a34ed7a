"""A tenant paused and resumed from the console, in a real browser against the local stack: the
tenants page shows its quota and state; Pause asks why and the page then shows it paused, by
whom and why; a flow of the tenant started meanwhile waits (the page counts it, and its link
opens the flow list filtered by the tenant); Resume lets the flow run to its end."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from relayflow.core.state import Status
from relayflow.local.polling import poll_until

from .conftest import Console
from .test_console_browser import new_id

pytestmark = pytest.mark.e2e

# Two flows at a time in the stack's tenants policy (tests/e2e/conftest.py, FAST_POLICIES); no
# other console test starts its flows.
TENANT = "e2e-limited"


def tenant_row(console: Console) -> WebElement:
    return console.driver.find_element(By.CSS_SELECTOR, f'tr.tenant-row[data-tenant="{TENANT}"]')


def confirm(console: Console, reason: str) -> None:
    """On a confirmation page: say why, confirm, and wait for the tenants page's notice."""
    console.find("reason").send_keys(reason)
    console.driver.find_element(By.ID, "confirm").click()
    console.find("notice")


def test_pause_a_tenant_see_its_flow_wait_then_resume_it(console: Console) -> None:
    # given the tenants page, the tenant active with its quota of two
    console.open("/console/tenants")
    row = tenant_row(console)
    assert row.get_attribute("data-paused") == "false"
    assert "/ 2 running" in row.find_element(By.CSS_SELECTOR, "td.quota").text

    # when an operator pauses it, saying why
    console.driver.find_element(By.ID, f"pause-{TENANT}").click()
    confirm(console, "their API is down")

    # then the page shows it paused, by whom and why
    assert "Pause recorded" in console.driver.find_element(By.ID, "notice").text
    row = tenant_row(console)
    assert row.get_attribute("data-paused") == "true"
    state = row.find_element(By.CSS_SELECTOR, "td.state").text
    assert "paused by local since" in state and "their API is down" in state
    resume = console.driver.find_element(By.ID, f"resume-{TENANT}")
    assert resume.is_displayed()
    resume_url = resume.get_attribute("href") or ""

    # and a flow of the tenant started now waits for it, counted on the page
    flow_id = new_id("paused")
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    console.h.publish(body, topic=f"flow-requests.{TENANT}")

    def waiting() -> bool:
        record = console.h.flow(flow_id)
        return record is not None and record.admission == "waiting"

    assert poll_until(waiting, timeout_s=30, interval_s=0.2), f"{flow_id} did not wait"
    console.open("/console/tenants")
    assert tenant_row(console).get_attribute("data-waiting") == "1"
    console.screenshot("console-tenants.png")

    # and its link opens the flow list filtered by the tenant, the flow there waiting
    tenant_row(console).find_element(By.CSS_SELECTOR, "td.waiting a").click()
    console.arrived(f"tenant={TENANT}")
    listed = console.read(
        lambda d: {
            r.get_attribute("data-flow-id"): r.get_attribute("data-status")
            for r in d.find_elements(By.CSS_SELECTOR, "tr.flow-row")
        }
    )
    assert listed == {flow_id: Status.PENDING.value}
    shown = console.driver.find_element(By.ID, "tenant-filter").get_attribute("value")
    assert shown == TENANT

    # when the operator resumes it (the Resume button's page)
    console.driver.get(resume_url)
    confirm(console, "they are back")

    # then it is active again, and its flow is admitted and runs to its end
    notice = console.driver.find_element(By.ID, "notice").text
    assert "Resume recorded" in notice and "(0 put-off tasks brought forward now" in notice
    row = tenant_row(console)
    assert row.get_attribute("data-paused") == "false"
    assert "resumed by local" in row.find_element(By.CSS_SELECTOR, "td.state").text
    record = console.h.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED
    assert "admitted" in [e.outcome for e in record.history]
