"""The console in a real headless browser (Debian's chromium, driven by Selenium) against a
whole local stack of its own, with the e2e tests' short policies and metrics kept in memory.

Nothing is downloaded at run time: Selenium is pointed at /usr/bin/chromium and
/usr/bin/chromedriver (``apt-get install chromium chromium-driver``; .ci/run installs them).
Screenshots go to each test's tmp dir, and also to ``$RELAYFLOW_SCREENSHOTS_DIR`` when it is
set (``RELAYFLOW_SCREENSHOTS_DIR=docs`` refreshes the README's).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import requests
from google.cloud import firestore
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from relayflow.gcp.store import FlowStore
from relayflow.local.ports import HOST, Ports
from relayflow.local.stack import Stack
from tests.e2e.conftest import FAST_POLICIES, PROJECT, Harness

CONSOLE_BASE_PORT = int(os.environ.get("RELAYFLOW_TEST_BASE_PORT", "18120")) + 700
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)
WAIT_S = 60.0
T = TypeVar("T")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def console_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(
        ports=Ports(CONSOLE_BASE_PORT),
        state_dir=tmp_path_factory.mktemp("console-stack"),
        base_env={**os.environ, **FAST_POLICIES, "RELAYFLOW_METRICS_EXPORTER": "local"},
        sweep_interval_s=0,
    )
    stack.up()
    try:
        # The api opens its Firestore channel with the first request that reads (seconds on a
        # busy machine): one read now, so that no test's first read runs into its timeout.
        warm = requests.get(f"http://{HOST}:{stack.ports.api}/flows:counts", timeout=120)
        warm.raise_for_status()
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="session")
def browser() -> Iterator[WebDriver]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail(
            f"{CHROMIUM} and {CHROMEDRIVER} are needed: apt-get install chromium chromium-driver"
        )
    profile = tempfile.mkdtemp(prefix="relayflow-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # The console's own messages, a Content-Security-Policy violation among them.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()  # stops chromium and the chromedriver Selenium started
        shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Console:
    """The browser on the console of the stack, and the stack's handles (``h``)."""

    driver: WebDriver
    h: Harness
    shots: Path

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.h.ports.api}{path}"

    def open(self, path: str) -> None:
        self.driver.get(self.url(path))

    def find(self, element_id: str, timeout_s: float = WAIT_S) -> WebElement:
        """The element with this id, once the page shows it: a click that submits a form returns
        before the browser has loaded the page it leads to."""
        found = self.wait(lambda d: d.find_elements(By.ID, element_id), timeout_s)
        assert isinstance(found, list) and found, element_id
        # The page may still be loading the rest of what the test reads next.
        self.wait(lambda d: d.execute_script("return document.readyState") == "complete")
        element: WebElement = found[0]
        return element

    def arrived(self, url_part: str) -> None:
        """Wait until the browser has loaded the page whose URL holds ``url_part`` (a submitted
        form changes the URL before the page it leads to has loaded)."""

        def loaded(d: WebDriver) -> bool:
            ready = d.execute_script("return document.readyState") == "complete"
            return url_part in d.current_url and ready

        self.wait(loaded)

    def read(self, read: Callable[[WebDriver], T]) -> T:
        """What ``read`` finds on the page, read again if the page replaced an element while it
        read (a stale element)."""
        found: list[T] = []

        def once(d: WebDriver) -> bool:
            found[:] = [read(d)]
            return True

        self.wait(once)
        return found[0]

    def text(self, element_id: str) -> str:
        """The text of the element with this id, read again if a live view replaced it."""
        return self.read(lambda d: str(d.find_element(By.ID, element_id).text))

    def click(self, element_id: str) -> None:
        """Click the element with this id, found again if a live view replaced it first (a
        stale element is not clicked, so clicking again does not click twice)."""

        def clicked(d: WebDriver) -> bool:
            d.find_element(By.ID, element_id).click()
            return True

        self.wait(clicked)

    def wait(self, condition: Callable[[WebDriver], object], timeout_s: float = WAIT_S) -> object:
        # The live views replace what they refresh, and a submitted form's page replaces the
        # last: an element found a moment ago may be gone when it is read, so look again.
        waiting = WebDriverWait(
            self.driver,
            timeout_s,
            poll_frequency=0.2,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        )
        return waiting.until(_detached_as_stale(condition))

    def screenshot(self, name: str) -> Path:
        path = self.shots / name
        assert self.driver.save_screenshot(str(path)), f"no screenshot {path}"
        published = os.environ.get("RELAYFLOW_SCREENSHOTS_DIR")
        if published:
            Path(published).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(published) / name)
        return path


# Chromedriver reports an element swapped out between its lookup and its read not always as a
# stale element but sometimes as this "unknown error" from the DevTools protocol.
DETACHED = "does not belong to the document"


def _detached_as_stale(condition: Callable[[WebDriver], object]) -> Callable[[WebDriver], object]:
    def check(driver: WebDriver) -> object:
        try:
            return condition(driver)
        except WebDriverException as error:
            if isinstance(error, StaleElementReferenceException) or DETACHED not in str(error):
                raise
            raise StaleElementReferenceException(str(error)) from error

    return check


@pytest.fixture
def console(
    console_stack: Stack,
    browser: WebDriver,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Console]:
    for name, value in console_stack.env().items():
        monkeypatch.setenv(name, value)  # the Google clients find the emulators by these
    db = firestore.Client(project=PROJECT)
    h = Harness(console_stack, FlowStore(db), db)
    h.client_api("DELETE", "/admin/faults")
    yield Console(browser, h, tmp_path)
    h.client_api("DELETE", "/admin/faults")
