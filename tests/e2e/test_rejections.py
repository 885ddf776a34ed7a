"""Malformed start messages: each is recorded in `rejected` with its reason, and nothing crashes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from relayflow.core.engine import safe_id
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness

pytestmark = pytest.mark.e2e

GOOD_INPUT = {"resource": "acme-1"}
MALFORMED: list[tuple[str, bytes | dict[str, Any], str]] = [
    ("empty data", b"", "message has no data"),
    ("not utf-8", b"\xff\xfe\xfd", "not UTF-8"),
    ("not json", b"start please", "not JSON"),
    ("json array", b'[{"flow": "registration"}]', "must be a JSON object, got list"),
    ("no flow", {"input": GOOD_INPUT}, "flow: Field required"),
    ("unknown flow", {"flow": "teleport", "input": {}}, "unknown flow 'teleport'"),
    ("input not object", {"flow": "registration", "input": "acme-1"}, "input:"),
    (
        "bad flow id",
        {"flow": "registration", "input": GOOD_INPUT, "flow_id": "a/b"},
        "flow_id: String should match pattern",
    ),
    (
        "negative deadline",
        {"flow": "registration", "input": GOOD_INPUT, "deadline_s": -5},
        "deadline_s: Input should be greater than 0",
    ),
    (
        "unknown field",
        {"flow": "registration", "input": GOOD_INPUT, "urgency": "high"},
        "urgency: Extra inputs are not permitted",
    ),
    ("input fails schema", {"flow": "registration", "input": {}}, "input.resource: Field required"),
    (
        # The local stack offloads large values (RELAYFLOW_OFFLOAD_BUCKET): an input may take
        # 8 MiB, under Pub/Sub's 10 MB message.
        "input too large",
        {"flow": "registration", "input": {"resource": "acme", "blob": "x" * (8 * 2**20)}},
        f"the limit is {8 * 2**20}",
    ),
]


@pytest.mark.parametrize(
    ("body", "reason"), [(b, r) for _, b, r in MALFORMED], ids=[k for k, _, _ in MALFORMED]
)
def test_a_malformed_message_is_recorded_with_its_reason(
    harness: Harness, body: bytes | dict[str, Any], reason: str
) -> None:
    # given a malformed start message (empty data needs an attribute to be publishable)
    message_id = harness.publish(body, kind="malformed") if body == b"" else harness.publish(body)

    # when the start function has handled it
    found: list[dict[str, Any]] = []

    def recorded() -> bool:
        doc = harness.store.rejected(safe_id(message_id))
        if doc:
            found.append(doc)
        return bool(doc)

    assert poll_until(recorded, timeout_s=20), f"no rejected record for {message_id}"

    # then the record names the message and says exactly what was wrong, and no flow exists
    assert found[0]["message_id"] == message_id
    assert reason in found[0]["reason"], found[0]["reason"]
    assert harness.store.get(message_id) is None
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    assert found[0]["data_truncated"] is (len(raw) > 16384)


def test_the_start_function_survives_every_malformed_message(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given every malformed kind was published (the tests above), the function still runs flows
    flow_id = new_id("after-malformed")
    harness.publish({"flow": "registration", "flow_id": flow_id, "input": GOOD_INPUT})
    assert harness.wait_terminal(flow_id).result is not None
