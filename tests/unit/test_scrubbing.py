"""Scrubbing (relayflow.core.scrubbing): the values a request opened are replaced in its text,
in a log line as JSON escapes them too, only inside the request's scope, and short values are
left alone."""

from __future__ import annotations

import json

from relayflow.core import scrubbing


def test_a_value_opened_in_the_scope_is_scrubbed_from_its_text() -> None:
    with scrubbing.revealing():
        scrubbing.reveal({"card": {"number": "4111111111111111", "cvc": "737"}, "n": 123456})
        assert scrubbing.scrubbed("card 4111111111111111 declined") == "card [redacted] declined"
        assert scrubbing.scrubbed("amount 123456") == "amount [redacted]"
        assert scrubbing.scrubbed("cvc 737") == "cvc 737"  # under MIN_CHARS: left alone
    assert scrubbing.scrubbed("card 4111111111111111") == "card 4111111111111111"  # scope over


def test_outside_any_scope_nothing_is_noted() -> None:
    scrubbing.reveal("4111111111111111")
    assert scrubbing.revealed() == frozenset()


def test_a_longer_value_goes_before_its_parts() -> None:
    with scrubbing.revealing():
        scrubbing.reveal(["alice", "alice@example.com"])
        assert scrubbing.scrubbed("mail alice@example.com") == "mail [redacted]"


def test_a_json_line_is_scrubbed_as_json_escapes_the_value() -> None:
    secret = 'Ünïcode "quoted" line'
    line = json.dumps({"message": f"saw {secret}"})
    with scrubbing.revealing():
        scrubbing.reveal(secret)
        assert json.loads(scrubbing.scrubbed_json(line)) == {"message": "saw [redacted]"}
