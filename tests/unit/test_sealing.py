"""Sealed values (relayflow.core.sealing) with the Tink sealer and the tests' AES-SIV one: a
value opens where it was sealed and nowhere else, an altered one does not open, a document is
sealed once and sealing it again changes nothing, and a caller who may not read them sees
``[redacted]``."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from relayflow.core.errors import ConfigError, SealingUnavailable, UnreadableSealedValue
from relayflow.core.flows import ActionStep, Flow, Registry
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord, Result
from relayflow.core.sealing import (
    Sealer,
    Sealing,
    is_sealed,
    open_value,
    opened_result,
    redacted,
    seal_value,
)
from relayflow.core.state import Status
from relayflow.gcp import sealer as tink_sealer
from relayflow.gcp.sealer import TinkSealer, new_keyset
from relayflow.testing import MemorySealer

CARD = "4111111111111111"
PATH = ("input", "card", "number")


@pytest.fixture(params=["tink", "memory"])
def sealer(request: pytest.FixtureRequest) -> Sealer:
    if request.param == "tink":
        return TinkSealer.from_keyset(new_keyset())
    return MemorySealer()


def test_a_value_opens_where_it_was_sealed(sealer: Sealer) -> None:
    for value in (CARD, 42, {"nested": [1, "two"]}, None):
        marker = seal_value(sealer, value, "order-1", PATH)
        assert is_sealed(marker) and marker["p"] == list(PATH)
        assert open_value(sealer, marker, "order-1", PATH) == value


def test_the_marker_holds_no_clear_value(sealer: Sealer) -> None:
    marker = seal_value(sealer, CARD, "order-1", PATH)
    assert CARD not in json.dumps(marker)


def test_another_flows_marker_does_not_open(sealer: Sealer) -> None:
    marker = seal_value(sealer, CARD, "order-1", PATH)
    with pytest.raises(UnreadableSealedValue, match="does not open"):
        open_value(sealer, marker, "order-2", PATH)


def test_a_marker_moved_to_another_field_does_not_open(sealer: Sealer) -> None:
    marker = seal_value(sealer, CARD, "order-1", PATH)
    with pytest.raises(UnreadableSealedValue, match="sealed for another field"):
        open_value(sealer, marker, "order-1", ("input", "card", "cvc"))
    # ... nor with its path rewritten to the field it was moved to
    forged = {**marker, "p": ["input", "card", "cvc"]}
    with pytest.raises(UnreadableSealedValue, match="does not open"):
        open_value(sealer, forged, "order-1", ("input", "card", "cvc"))


def test_an_altered_marker_does_not_open(sealer: Sealer) -> None:
    marker = seal_value(sealer, CARD, "order-1", PATH)
    raw = bytearray(base64.b64decode(marker["ct"]))
    raw[-1] ^= 1
    altered = {**marker, "ct": base64.b64encode(bytes(raw)).decode()}
    with pytest.raises(UnreadableSealedValue, match="does not open"):
        open_value(sealer, altered, "order-1", PATH)
    with pytest.raises(UnreadableSealedValue, match="malformed"):
        open_value(sealer, {**marker, "ct": "not base64!"}, "order-1", PATH)


def test_another_keys_marker_does_not_open() -> None:
    marker = seal_value(TinkSealer.from_keyset(new_keyset()), CARD, "order-1", PATH)
    with pytest.raises(UnreadableSealedValue, match="keyset lacks its key"):
        open_value(TinkSealer.from_keyset(new_keyset()), marker, "order-1", PATH)


def test_sealing_is_deterministic(sealer: Sealer) -> None:
    """The same value at the same place seals the same: a document written again is unchanged."""
    assert seal_value(sealer, CARD, "o", PATH) == seal_value(sealer, CARD, "o", PATH)
    assert seal_value(sealer, CARD, "o", PATH) != seal_value(sealer, CARD, "p", PATH)


def test_a_keyset_encrypted_by_a_kms_key_is_read_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cloud's keyset is encrypted by a Cloud KMS key (here a local AEAD stands in for
    Cloud KMS's: the network is not reached)."""
    import tink
    from tink import aead

    aead.register()
    kek = tink.new_keyset_handle(aead.aead_key_templates.AES256_GCM).primitive(aead.Aead)
    uri = "gcp-kms://projects/p/locations/l/keyRings/r/cryptoKeys/k"
    monkeypatch.setattr(tink_sealer, "kms_aead", lambda key_uri: kek)
    encrypted = new_keyset(key_uri=uri)
    assert "encryptedKeyset" in encrypted
    sealed = TinkSealer.from_keyset(encrypted, key_uri=uri)
    assert sealed.open(sealed.seal(b"x", b"ad"), b"ad") == b"x"
    with pytest.raises(ConfigError, match="cannot be read"):
        TinkSealer.from_keyset(encrypted)  # not cleartext


def test_a_kms_key_uri_must_be_one() -> None:
    with pytest.raises(ConfigError, match="starts with gcp-kms://"):
        tink_sealer.kms_aead("projects/p/keys/k")


# -- a flow document ---------------------------------------------------------------------------


def noop(ctx: Any) -> dict[str, Any]:
    return {}


FLOW = Flow(
    "pay",
    (ActionStep("charge", noop),),
    sensitive=("input.card.number", "outputs.charge.token", "input.cards.*.number"),
)


def record(**fields: Any) -> FlowRecord:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    base: dict[str, Any] = {
        "flow_id": "order-1",
        "flow": "pay",
        "input": {"card": {"number": CARD}, "cards": [{"number": "5500"}], "customer": "c-1"},
        "status": Status.SUCCEEDED,
        "position": Position(step="charge", step_index=0, kind=TaskKind.ACTION),
        "created_at": now,
        "updated_at": now,
    }
    return FlowRecord(**{**base, **fields})


def test_a_document_is_sealed_where_its_flow_marks_it() -> None:
    sealing = Sealing(Registry([FLOW]), MemorySealer())
    data = {"token": "tok-1", "last4": "1111"}
    ended = record(
        outputs={"charge": data},
        result=Result(status=Status.SUCCEEDED, code="OK", message="done", data=data),
    )
    sealed = sealing.sealed(ended)
    stored = json.dumps(sealed.to_doc(), default=str)
    assert CARD not in stored and "tok-1" not in stored and "5500" not in stored
    assert sealed.input["customer"] == "c-1" and sealed.outputs["charge"]["last4"] == "1111"
    assert is_sealed(sealed.result.data["token"])  # type: ignore[union-attr]
    assert sealing.sealed(sealed) == sealed  # sealed once: again changes nothing
    opened = sealing.opened(sealed, sealed.input, ("input",))
    assert opened == ended.input
    owner = sealed.key
    assert opened_result(sealing.sealer, sealed.result.data, owner) == data  # type: ignore[arg-type,union-attr]


def test_a_flow_that_marks_nothing_is_left_as_it_is() -> None:
    plain = Flow("plain", (ActionStep("charge", noop),))
    sealing = Sealing(Registry([plain]))  # no key needed
    unmarked = record(flow="plain")
    assert sealing.sealed(unmarked) is unmarked


def test_without_a_key_a_marked_value_is_never_stored_in_clear() -> None:
    with pytest.raises(SealingUnavailable, match=r"marks input\.card\.number sensitive"):
        Sealing(Registry([FLOW])).sealed(record())


def test_a_caller_who_may_not_read_sees_redacted() -> None:
    sealing = Sealing(Registry([FLOW]), MemorySealer())
    doc = sealing.sealed(record()).model_dump(mode="json")
    shown = redacted(doc)
    assert shown["input"]["card"]["number"] == "[redacted]"
    assert shown["input"]["cards"] == [{"number": "[redacted]"}]
    assert sealing.shown(doc, "order-1")["input"]["card"]["number"] == CARD
