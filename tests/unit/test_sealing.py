"""Sealed values (relayflow.core.sealing) with the Tink sealer and the tests' AES-SIV one: a
value opens where it was sealed and nowhere else, an altered one does not open; the sealing
codec seals a value where its flow marks it (a lane's item output where its ForEach lists it),
escaped caller keys hide nothing from it, without a key it stores nothing in clear, and a
caller who may not read them sees ``[redacted]``."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from relayflow.core.codec import MARKER, Chain, Slot
from relayflow.core.errors import ConfigError, SealingUnavailable, UnreadableSealedValue
from relayflow.core.flows import ActionStep, Flow, ForEach, Registry
from relayflow.core.sealing import (
    Sealed,
    Sealer,
    Sealing,
    flow_path,
    is_sealed,
    open_value,
    opened_result,
    redacted,
    seal_value,
)
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


# -- the sealing codec ---------------------------------------------------------------------------


def noop(ctx: Any) -> dict[str, Any]:
    return {}


FLOW = Flow(
    "pay",
    (
        ActionStep("charge", noop),
        ForEach("each", items=lambda ctx: [], steps=(ActionStep("tokenize", noop),)),
    ),
    sensitive=("input.card.number", "outputs.charge.token", "input.cards.*.number"),
)
INPUT = {"card": {"number": CARD}, "cards": [{"number": "5500"}], "customer": "c-1"}


def slot(*path: str, flow: str = "pay", scope: str | None = None) -> Slot:
    return Slot(key="order-1", incarnation="18f", flow=flow, version=1, path=path, scope=scope)


def test_a_value_is_sealed_where_its_flow_marks_it_and_opens_there() -> None:
    sealing = Sealing(Registry([FLOW]), MemorySealer())
    codec = Chain([Sealed(sealing)])
    stored = codec.encode(INPUT, slot("input"))
    assert CARD not in json.dumps(stored) and "5500" not in json.dumps(stored)
    assert stored["customer"] == "c-1" and stored["card"]["number"]["p"] == list(PATH)
    assert codec.decode(stored, slot("input")) == INPUT
    with pytest.raises(UnreadableSealedValue, match="another field"):
        codec.decode({"x": stored["card"]["number"]}, slot("input"))  # moved: does not open
    data = {"token": "tok-1", "last4": "1111"}
    sealed = codec.encode(data, slot("outputs", "charge"))
    assert is_sealed(sealed["token"]) and sealed["last4"] == "1111"
    assert opened_result(sealing.sealer, sealed, "order-1") == data  # type: ignore[arg-type]


def test_a_callers_envelope_key_does_not_hide_a_field_from_sealing() -> None:
    """The chain escapes a caller's ``$relayflow`` keys first; the sealing codec seals the
    value as the caller gave it, at the flow's own paths."""
    codec = Chain([Sealed(Sealing(Registry([FLOW]), MemorySealer()))])
    given = {"card": {MARKER: "mine", "number": CARD}, MARKER: 1}
    stored = codec.encode(given, slot("input"))
    assert CARD not in json.dumps(stored)
    assert codec.decode(stored, slot("input")) == given


def test_a_lanes_last_item_step_output_is_sealed_as_the_foreach_lists_it() -> None:
    flow = Flow(
        "batch",
        (
            ForEach(
                "each", items=lambda ctx: [], steps=(ActionStep("a", noop), ActionStep("b", noop))
            ),
        ),
        sensitive=("outputs.each.items.*.token",),
    )
    assert flow_path(flow, slot("outputs", "b", scope="each")) == ("outputs", "each", "items", "*")
    assert flow_path(flow, slot("outputs", "a", scope="each")) is None  # in no output of the flow
    assert flow_path(flow, slot("input", scope="each")) == ("input",)
    sealing = Sealing(Registry([flow]), MemorySealer())
    lane_output = Sealed(sealing).encode(
        {"token": "t-1"}, slot("outputs", "b", flow="batch", scope="each")
    )
    assert lane_output["token"]["p"] == ["outputs", "each", "items", "*", "token"]
    assert Sealed(sealing).encode(
        {"token": "t-1"}, slot("outputs", "a", flow="batch", scope="each")
    ) == {"token": "t-1"}


def test_a_flow_that_marks_nothing_is_left_as_it_is() -> None:
    plain = Flow("plain", (ActionStep("charge", noop),))
    codec = Sealed(Sealing(Registry([plain])))  # no key needed
    value = {"card": {"number": CARD}}
    assert codec.encode(value, slot("input", flow="plain")) is value
    with pytest.raises(ValueError, match="no path"):
        codec.encode(value, slot(flow="plain"))  # a value is never sealed at a guessed place


def test_without_a_key_a_marked_value_is_never_stored_in_clear() -> None:
    codec = Chain([Sealed(Sealing(Registry([FLOW])))])
    with pytest.raises(SealingUnavailable, match=r"marks input\.card\.number sensitive"):
        codec.encode(INPUT, slot("input"))


def test_a_caller_who_may_not_read_sees_redacted() -> None:
    sealing = Sealing(Registry([FLOW]), MemorySealer())
    doc = {"input": Chain([Sealed(sealing)]).encode(INPUT, slot("input"))}
    shown = redacted(doc)
    assert shown["input"]["card"]["number"] == "[redacted]"
    assert shown["input"]["cards"] == [{"number": "[redacted]"}]
    assert sealing.shown(doc, "order-1")["input"]["card"]["number"] == CARD
