"""Sensitive fields in the api and the console, in process: a viewer and an operator see them
``[redacted]`` in a flow, a list of whole documents, an offloaded value read back
(``?resolve=true``) and the console's page; a sensitive reader sees them in clear, and each
such read is logged; a dead letter's sensitive input is redacted; a service whose flows mark
fields does not start without a keyset."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from relayflow import ActionStep, Flow
from relayflow.core.dead_letters import DeadLetter
from relayflow.core.errors import ConfigError
from relayflow.core.flows import Registry
from relayflow.core.payloads import refs
from relayflow.core.sealing import seal_value
from relayflow.gcp.sealer import write_keyset
from relayflow.metrics import Metrics
from relayflow.runtime import build_sealing
from relayflow.settings import Settings
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.operations import Operations
from tests.unit.test_api import OPERATOR, VIEWER, FakeDeadLetters, token, verifier
from tests.unit.test_sealed_payloads import PAD, Order, order
from tests.unit.test_sealed_payloads import harness as offloading
from tests.unit.test_sensitive_flows import CARD, CVC, INPUT, payment

READER = "auditor@example.com"


class Api:
    def __init__(self, access: Access, harness: Harness | None = None) -> None:
        self.h = harness or Harness(payment())
        self.letters = FakeDeadLetters()
        ops = Operations(
            engine=self.h.engine,
            store=self.h.store,
            access=access,
            dead_letters=self.letters,
            counters=Counters(),
            metrics=Metrics(),
            registry=Registry([payment()]),
            sealing=self.h.sealing,
        )
        self.client: FlaskClient = build_api(ops).test_client()

    def paid(self, flow_id: str = "pay-1") -> str:
        self.h.run(self.h.start("payment", INPUT, flow_id=flow_id))
        return flow_id

    def token(self, flow_id: str) -> str:
        return str(self.h.opened(flow_id).outputs["authorize"]["token"])


def access() -> Access:
    return Access(
        verifier=verifier(VIEWER, OPERATOR, READER),
        viewers=frozenset({VIEWER, READER}),
        operators=frozenset({OPERATOR}),
        sensitive_readers=frozenset({READER}),
    )


@pytest.fixture
def api() -> Iterator[Api]:
    yield Api(access())


@pytest.mark.parametrize("who", [VIEWER, OPERATOR])
def test_a_viewer_and_an_operator_see_them_redacted(api: Api, who: str) -> None:
    flow_id = api.paid()
    secrets = (CARD, CVC, api.token(flow_id))
    shown = api.client.get(f"/flows/{flow_id}", headers=token(who))
    listed = api.client.get("/flows?view=full", headers=token(who))
    assert shown.status_code == listed.status_code == 200
    for text in (shown.get_data(as_text=True), listed.get_data(as_text=True)):
        assert not [s for s in secrets if s in text]
    doc = shown.get_json()
    assert doc["input"]["card"] == {"number": "[redacted]", "cvc": "[redacted]"}
    assert doc["input"]["customer"] == "c-1"
    assert doc["result"]["data"]["token"] == "[redacted]"
    assert doc["result"]["data"]["last4"] == "1111"
    assert "$sealed" not in shown.get_data(as_text=True)


def test_a_sensitive_reader_sees_them_and_the_read_is_logged(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    flow_id = api.paid()
    with caplog.at_level(logging.INFO, logger="relayflow.web.redaction"):
        doc = api.client.get(f"/flows/{flow_id}", headers=token(READER)).get_json()
    assert doc["input"]["card"] == {"number": CARD, "cvc": CVC}
    assert doc["result"]["data"]["token"] == api.token(flow_id)
    (read,) = [r for r in caplog.records if r.getMessage() == "sensitive fields shown"]
    assert (read.identity, read.flow_id) == (READER, flow_id)  # type: ignore[attr-defined]


def test_resolve_reads_an_offloaded_value_back_with_them_redacted_but_for_a_reader() -> None:
    h = offloading(Flow("orders", (ActionStep("ship", lambda ctx: {}),), input_model=Order))
    api = Api(access(), h)
    h.run(h.start("orders", order(), flow_id="o-1"))
    assert refs(
        h.flow("o-1").input
    )  # the bucket holds it (sealed: tests/unit/test_sealed_payloads)
    for who, card in ((VIEWER, "[redacted]"), (READER, CARD)):
        doc = api.client.get("/flows/o-1?resolve=true", headers=token(who)).get_json()
        assert doc["input"] == {"card": card, "notes": PAD}


def test_the_console_shows_them_redacted(api: Api) -> None:
    flow_id = api.paid()
    page = api.client.get(f"/console/flows/{flow_id}", headers=token(OPERATOR))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "[redacted]" in text and CARD not in text and api.token(flow_id) not in text
    reader = api.client.get(f"/console/flows/{flow_id}", headers=token(READER))
    assert CARD in reader.get_data(as_text=True)


def test_the_local_caller_reads_them_only_when_listed() -> None:
    for readers, shown in ((frozenset(), "[redacted]"), (frozenset({"local"}), CARD)):
        api = Api(Access(verifier=None, sensitive_readers=readers))
        flow_id = api.paid()
        doc = api.client.get(f"/flows/{flow_id}", environ_base={"REMOTE_ADDR": "127.0.0.1"})
        assert doc.get_json()["input"]["card"]["number"] == shown


def test_a_dead_letters_sensitive_input_is_redacted(api: Api) -> None:
    body = json.dumps({"flow": "payment", "flow_id": "pay-9", "input": INPUT}).encode()
    api.letters.letters.append(
        DeadLetter(message_id="m-1", data=body, attributes={}, published_at=None)
    )
    shown = api.client.get("/dead-letters", headers=token(VIEWER)).get_json()
    (letter,) = shown["dead_letters"]
    assert CARD not in letter["data"] and CVC not in json.dumps(letter)
    assert json.loads(letter["data"])["input"]["card"]["number"] == "[redacted]"
    assert letter["redacted"] == "sensitive fields redacted"


def test_rejected_messages_are_listed_as_recorded(api: Api) -> None:
    bad = {"flow": "payment", "input": {**INPUT, "amount_cents": -1}}
    api.h.publish(bad)
    (listed,) = api.client.get("/rejected", headers=token(VIEWER)).get_json()["rejected"]
    assert CARD not in json.dumps(listed)
    assert listed["redacted"] == "sensitive fields redacted"
    assert "amount_cents" in listed["reason"]


def test_a_service_whose_flows_mark_fields_needs_a_keyset(tmp_path: Path) -> None:
    registry = Registry([payment()])
    with pytest.raises(ConfigError, match=r"flows payment v1 mark sensitive fields"):
        build_sealing(Settings(), registry)
    keyset = write_keyset(tmp_path / "keyset.json")
    assert oct(keyset.stat().st_mode & 0o777) == "0o600"
    sealing = build_sealing(Settings(sensitive_keyset_file=keyset), registry)
    assert sealing.sealer is not None
    marker = seal_value(sealing.sealer, CARD, "pay-1", ("input", "card", "number"))
    assert CARD.encode() not in base64.b64decode(marker["ct"])


def test_settings_refuse_two_keysets() -> None:
    with pytest.raises(ValueError, match="not both"):
        Settings(sensitive_keyset="{}", sensitive_keyset_file="/tmp/k.json")  # type: ignore[arg-type]
