"""The console's bulk page in process: the form makes a dry run whose table says per flow what
would happen and changes nothing; the run is confirmed with a reason and its progress shown;
viewers get neither form nor buttons; a form from another site is refused. (The browser test
is tests/console/test_console_bulk.py.)"""

from __future__ import annotations

import re

import pytest
from flask.testing import FlaskClient

from relayflow.core.state import Status
from relayflow.testing import Harness
from relayflow.web.access import Access

from .test_bulk_api import api_of, failed_demo_flows
from .test_console import SAME_SITE, text

DRY_RUN = {
    "action": "retry",
    "flow": "demo",
    "status": "FAILED",
    "tenant": "default",
    "reason": "fixed",
    "rate_per_s": "5",
}


def console(access: Access) -> tuple[Harness, FlaskClient]:
    h = failed_demo_flows()
    return h, api_of(h, access)


@pytest.fixture
def local() -> tuple[Harness, FlaskClient]:
    return console(Access(verifier=None))  # the local stack: everyone is an operator


def test_the_form_makes_a_dry_run_whose_table_says_what_would_happen(
    local: tuple[Harness, FlaskClient],
) -> None:
    h, client = local
    assert 'id="bulk-form"' in text(client.get("/console/bulk"))

    made = client.post("/console/bulk", data=DRY_RUN, headers=SAME_SITE)

    assert made.status_code == 303
    (bulk_id,) = re.findall(r"/console/bulk/(bulk-[0-9a-f]{12})$", made.headers["Location"])
    page = text(client.get(f"/console/bulk/{bulk_id}"))
    assert "3 flows matched: 3 to retry, 0 refused" in page
    assert page.count('class="preview-row"') == 3
    assert '<td class="rerun">reserve, await_ready</td>' in page
    assert 'id="confirm"' in page and "Retry 3 flows" in page
    assert {h.flow(f"bad-{i}").status for i in range(3)} == {Status.FAILED}
    assert bulk_id in text(client.get("/console/bulk"))


def test_the_run_is_confirmed_with_a_reason_and_its_progress_shown(
    local: tuple[Harness, FlaskClient],
) -> None:
    h, client = local
    location = client.post("/console/bulk", data=DRY_RUN, headers=SAME_SITE).headers["Location"]
    bulk_id = location.rsplit("/", 1)[1]
    no_reason = client.post(f"/console/bulk/{bulk_id}/run", data={}, headers=SAME_SITE)
    assert no_reason.status_code == 400
    assert h.bulk_runner.get(bulk_id).state.value == "previewed"

    ran = client.post(f"/console/bulk/{bulk_id}/run", data={"reason": "go"}, headers=SAME_SITE)

    assert ran.status_code == 303 and ran.headers["Location"].endswith("?notice=run")
    running = text(client.get(f"/console/bulk/{bulk_id}?notice=run"))
    assert "Run recorded" in running and 'data-active="true"' in running
    assert 'id="pause"' in running and 'id="confirm"' not in running
    h.run_bulk(bulk_id)
    live = text(client.get(f"/console/bulk/{bulk_id}/live"))
    assert 'data-active="false"' in live and '<strong id="bulk-done">3</strong>' in live
    done = text(client.get(f"/console/bulk/{bulk_id}"))
    assert done.count('<td class="outcome">done') == 3


def test_a_bad_form_is_a_400_page_that_says_what_is_wrong(
    local: tuple[Harness, FlaskClient],
) -> None:
    _, client = local
    bad = client.post("/console/bulk", data={**DRY_RUN, "rate_per_s": "999"}, headers=SAME_SITE)
    assert bad.status_code == 400 and "rate_per_s must be 0.01..50" in text(bad)
    nothing = client.post(
        "/console/bulk", data={"action": "retry", "reason": "x"}, headers=SAME_SITE
    )
    assert nothing.status_code == 400 and "filter: name at least one" in text(nothing)


def test_a_form_from_another_site_is_refused(local: tuple[Harness, FlaskClient]) -> None:
    h, client = local
    other = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    refused = client.post("/console/bulk", data=DRY_RUN, headers=other)
    assert refused.status_code == 403
    assert not h.bulk_store.actions


def test_the_form_makes_a_bulk_reset_to_a_step(local: tuple[Harness, FlaskClient]) -> None:
    h, client = local
    form = {**DRY_RUN, "action": "reset", "step": "reserve", "keep_effects": "on"}
    made = client.post("/console/bulk", data=form, headers=SAME_SITE)
    assert made.status_code == 303
    bulk_id = made.headers["Location"].rsplit("/", 1)[1]
    action = h.bulk_runner.get(bulk_id)
    assert (action.action.value, action.step, action.undo) == ("reset", "reserve", False)
    page = text(client.get(f"/console/bulk/{bulk_id}"))
    assert "reserve, keeping the effects" in page and "run again from reserve" in page
