"""The console under the api's guard, in a real browser: it runs under its
Content-Security-Policy (no violation while a flow's page refreshes itself and a form posts),
its own forms carry the Origin the guard admits, and a page of another origin that posts a
form or fires a bodiless request at the api changes nothing."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from relayflow.core.state import Status

from .conftest import Console
from .test_console_browser import (
    confirm_with_reason,
    never_activates,
    new_id,
    polled,
    start,
    status_shown,
)

pytestmark = pytest.mark.e2e


def browser_log(driver: WebDriver) -> list[dict[str, Any]]:
    """What the page logged since the last call (Chrome's log; the remote type lacks it)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[attr-defined]
    return entries


def csp_violations(driver: WebDriver) -> list[str]:
    entries = browser_log(driver)
    return [e["message"] for e in entries if "Content Security Policy" in e["message"]]


@pytest.fixture
def evil_site() -> Iterator[Callable[[str], str]]:
    """A site on another origin (another port of 127.0.0.1): ``publish(html)`` serves the page
    and gives its URL."""
    pages: dict[str, bytes] = {}

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def publish(html: str) -> str:
        path = f"/page-{len(pages)}.html"
        pages[path] = html.encode()
        return f"http://127.0.0.1:{server.server_address[1]}{path}"

    try:
        yield publish
    finally:
        server.shutdown()
        thread.join()


def test_the_console_runs_under_its_content_security_policy(console: Console) -> None:
    # given a flow that polls until it is cancelled
    flow_id = new_id("csp")
    never_activates(console, flow_id)
    start(console, flow_id)
    polled(console, flow_id)
    browser_log(console.driver)  # drop what earlier tests left

    # when its page is open, refreshes itself, and cancels it through its form
    console.open(f"/console/flows/{flow_id}")
    rows = 'tr.entry[data-kind="poll"]'
    shown = len(console.driver.find_elements(By.CSS_SELECTOR, rows))
    console.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) > shown)  # live.js
    confirm_with_reason(console, "cancel", "csp check")
    console.wait(status_shown(flow_id, Status.CANCELLED))

    # then the stylesheet applied (the header is dark), and nothing was blocked
    header = console.driver.find_element(By.CSS_SELECTOR, "header.top")
    assert header.value_of_css_property("background-color") == "rgba(17, 24, 39, 1)"
    assert csp_violations(console.driver) == []


def test_a_page_of_another_origin_cannot_cancel_a_flow(
    console: Console, evil_site: Callable[[str], str]
) -> None:
    # given a running flow
    flow_id = new_id("csrf")
    never_activates(console, flow_id)
    start(console, flow_id)
    polled(console, flow_id)

    # when a page on another origin fires what a browser sends without asking first: a
    # bodiless POST and a text/plain one at the JSON api, then a form at the console
    api = console.url("")
    page = evil_site(f"""<!doctype html><title>loading</title>
<form id="f" method="post" action="{api}/console/flows/{flow_id}/cancel">
  <input name="reason" value="forged"></form>
<script>
  Promise.allSettled([
    fetch("{api}/flows/{flow_id}:cancel", {{method: "POST", mode: "no-cors"}}),
    fetch("{api}/flows/{flow_id}:cancel",
          {{method: "POST", mode: "no-cors", body: '{{"reason": "forged"}}'}}),
  ]).then(() => {{ document.title = "sent"; document.getElementById("f").submit(); }});
</script>""")
    console.driver.get(page)

    # then the form's answer is the console's refusal, and the flow still runs
    console.wait(lambda d: d.current_url.startswith(api) and d.find_elements(By.ID, "error"))
    refusal = console.driver.find_element(By.ID, "error").text
    assert "403" in refusal and "another site" in refusal
    record = console.h.store.get(flow_id)
    assert record is not None and record.status is Status.RUNNING
    assert not [e for e in record.history if e.by]

    # (cancelled, so that it does not end during the tests after this one)
    console.open(f"/console/flows/{flow_id}")
    confirm_with_reason(console, "cancel", "tidy up")
    console.h.wait_terminal(flow_id)
