"""Sensitive fields in the console, in a real browser against the local stack: a payment flow
of the reference app has ended; its page shows the card's number and code and the token as
``[redacted]`` (the stack's caller, ``local``, is no sensitive reader), and nothing on the page
holds them in clear, while what is not sensitive (the customer, the card's last four digits)
shows as it is."""

from __future__ import annotations

import uuid

import pytest
from selenium.webdriver.common.by import By

from relayflow.core.state import Status

from .conftest import Console
from .test_console_browser import status_shown

pytestmark = pytest.mark.e2e

CARD, CVC = "4111111111111111", "737"


def test_a_viewer_sees_a_payments_card_and_token_redacted(console: Console) -> None:
    # given a payment flow that has ended
    flow_id = f"pay-{uuid.uuid4().hex[:8]}"
    card = {"number": CARD, "cvc": CVC}
    body = {"customer": "c-1", "amount_cents": 1250, "card": card}
    console.h.publish({"flow": "payment", "flow_id": flow_id, "input": body})
    record = console.h.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED

    # when its page is opened
    console.open(f"/console/flows/{flow_id}")
    console.wait(status_shown(flow_id, Status.SUCCEEDED))

    # then its sensitive fields read [redacted], the rest as it is, and no clear value is there
    shown = console.driver.find_element(By.ID, "input").text
    assert '"number": "[redacted]"' in shown and '"cvc": "[redacted]"' in shown
    assert '"customer": "c-1"' in shown
    result = console.driver.find_element(By.ID, "result").text
    assert '"token": "[redacted]"' in result and '"last4": "1111"' in result
    page = console.driver.page_source
    assert CARD not in page and "tok_" not in page and "$sealed" not in page
    console.screenshot("console-sensitive.png")
