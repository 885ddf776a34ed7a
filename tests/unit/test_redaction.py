"""What a refused or dead-lettered message keeps of its flow's sensitive input
(relayflow.core.redaction): the marked fields redacted, everything kept for an app that marks
nothing, nothing kept when its flow cannot be told."""

from __future__ import annotations

import json
from typing import Any

from relayflow.core.flows import ActionStep, Flow, Registry
from relayflow.core.redaction import REDACTED_NOTE, WITHHELD, kept_message


def noop(ctx: Any) -> dict[str, Any]:
    return {}


PAY = Flow("pay", (ActionStep("charge", noop),), sensitive=("input.card.number",))
PLAIN = Flow("plain", (ActionStep("charge", noop),))
MESSAGE = {"flow": "pay", "input": {"card": {"number": "4111111111111111"}, "who": "c-1"}}


def test_the_flows_sensitive_input_is_redacted() -> None:
    kept, note = kept_message(json.dumps(MESSAGE).encode(), Registry([PAY, PLAIN]))
    assert json.loads(kept)["input"] == {"card": {"number": "[redacted]"}, "who": "c-1"}
    assert note == REDACTED_NOTE


def test_an_app_that_marks_nothing_keeps_the_message_whole() -> None:
    data = b"not even json"
    assert kept_message(data, Registry([PLAIN])) == (data, "")


def test_a_message_whose_flow_cannot_be_told_keeps_nothing() -> None:
    registry = Registry([PAY])
    for data in (b"not json", b"[1]", json.dumps({**MESSAGE, "flow": "other"}).encode()):
        assert kept_message(data, registry) == (b"", WITHHELD)


def test_a_flow_that_marks_no_input_keeps_it() -> None:
    outputs_only = Flow("out", (ActionStep("charge", noop),), sensitive=("outputs.charge.t",))
    data = json.dumps({"flow": "out", "input": {"x": "1"}}).encode()
    assert kept_message(data, Registry([outputs_only])) == (data, "")
