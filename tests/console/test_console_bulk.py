"""The console's bulk dry run in a real browser against a running local stack: the form's dry
run lists each failed flow with the steps a retry runs again and changes nothing; confirmed
with a reason, the run's progress updates live until every flow succeeded."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from relayflow.core.state import Status

from .conftest import Console
from .test_console_guard import csp_violations

pytestmark = pytest.mark.e2e
FLOWS = 3
REFUSED = [{"method": "POST", "path_prefix": "/registrations", "status": 400, "count": None}]


def test_a_bulk_dry_run_lists_what_a_retry_would_do_then_runs_it_live(console: Console) -> None:
    # given three flows the client API refused
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    run = uuid.uuid4().hex[:8]
    flows = [f"console-bulk-{run}-{i}" for i in range(FLOWS)]
    console.h.client_api("POST", "/admin/faults", json=REFUSED)
    for flow_id in flows:
        body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
        console.h.publish(body)
    assert {console.h.wait_terminal(f).status for f in flows} == {Status.FAILED}
    console.h.client_api("DELETE", "/admin/faults")

    # when an operator fills the bulk form and asks for a dry run
    console.open("/console/bulk")
    driver = console.driver
    Select(driver.find_element(By.ID, "bulk-kind")).select_by_value("retry")
    driver.find_element(By.ID, "bulk-flow").send_keys("registration")
    Select(driver.find_element(By.ID, "bulk-status")).select_by_value("FAILED")
    driver.execute_script(f"document.getElementById('bulk-from').value = '{since}'")
    driver.find_element(By.ID, "bulk-reason").send_keys("client API fixed")
    driver.find_element(By.ID, "dry-run").click()

    # then the dry run lists each flow and what a retry does to it, and nothing has changed
    console.wait(lambda d: d.find_elements(By.ID, "previews"))
    rows = console.read(
        lambda d: [
            (
                r.get_attribute("data-flow-id") or "",
                r.find_element(By.CSS_SELECTOR, "td.rerun").text,
            )
            for r in d.find_elements(By.CSS_SELECTOR, "tr.preview-row")
        ]
    )
    assert sorted(flow_id for flow_id, _ in rows) == sorted(flows)
    rerun = {steps for _, steps in rows}
    assert rerun == {"register, await_registration, create_entity"}
    matched = console.read(lambda d: d.find_element(By.ID, "bulk-matched").text)
    assert matched == f"{FLOWS} flows matched: {FLOWS} to retry, 0 refused"
    assert console.read(lambda d: d.find_element(By.ID, "bulk-state").text) == "previewed"
    console.screenshot("console-bulk-dry-run.png")
    assert {console.h.flow(f).status for f in flows} == {Status.FAILED}  # type: ignore[union-attr]

    # and confirmed with a reason, the run's progress updates without a reload until done
    driver.find_element(By.ID, "reason").send_keys("go")
    driver.find_element(By.ID, "confirm").click()

    def finished(d: WebDriver) -> bool:
        return d.find_element(By.ID, "bulk-state").text == "done"

    console.wait(finished)
    assert console.read(lambda d: d.find_element(By.ID, "bulk-done").text) == str(FLOWS)
    assert {console.h.wait_terminal(f).status for f in flows} == {Status.SUCCEEDED}
    assert not csp_violations(driver)  # the live view's script ran within the policy
