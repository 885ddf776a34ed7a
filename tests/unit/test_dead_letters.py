"""relayflow.core.dead_letters: a held start message as operators see it — how often it was
delivered before Pub/Sub gave up on it, and its data as bounded text."""

from __future__ import annotations

import pytest

from relayflow.core.dead_letters import DELIVERY_COUNT, DeadLetter


def letter(data: bytes = b"{}", attributes: dict[str, str] | None = None) -> DeadLetter:
    return DeadLetter(message_id="m-1", data=data, attributes=attributes or {}, published_at=None)


def test_the_delivery_count_is_the_one_pubsub_attached() -> None:
    assert letter(attributes={DELIVERY_COUNT: "5"}).delivery_count == 5


@pytest.mark.parametrize("count", [None, "", "five", "-1"])
def test_a_missing_or_unreadable_delivery_count_is_unknown(count: str | None) -> None:
    attributes = {} if count is None else {DELIVERY_COUNT: count}
    assert letter(attributes=attributes).delivery_count is None


def test_its_data_is_text_with_undecodable_bytes_replaced_and_bounded() -> None:
    held = letter(b'{"flow": "x"}\xff' + b"a" * 100)
    assert held.text().startswith('{"flow": "x"}\ufffd')
    assert held.text(limit=4) == '{"fl'
    assert len(held.text()) == 14 + 100
