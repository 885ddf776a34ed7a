"""relayflow.core.codec: the one seam where stored values change form. A caller's value holding
the envelope's key is escaped and read back as given; an envelope no codec reads is refused;
a chain encodes in order and decodes in reverse, so a sealing codec placed before the offload
one has the bucket hold sealed values."""

from __future__ import annotations

from typing import Any

import pytest

from relayflow.core.codec import (
    MARKER,
    PLAIN,
    Chain,
    EnvelopeError,
    Slot,
    envelope,
    escape,
    unescape,
    walk,
)
from relayflow.core.errors import PayloadCorrupt
from relayflow.core.payloads import Offload, ref_of
from relayflow.testing.memory import MemoryBlobs

SLOT = Slot(key="order-1", incarnation="18f", flow="orders", version=1, path=("input",))


def test_a_caller_key_is_escaped_and_read_back_as_given() -> None:
    value = {"a": [{MARKER: 1, "b": {MARKER: {"ref": {}}}}], MARKER: "top"}

    stored = escape(value)

    assert set(stored) == {MARKER} and set(stored[MARKER]) == {"literal"}
    assert unescape(stored) == value
    assert PLAIN.decode(PLAIN.encode(value, SLOT), SLOT) == value
    assert escape({"plain": [1, {"x": None}]}) == {"plain": [1, {"x": None}]}


def test_an_envelope_no_codec_reads_is_refused_as_corrupt() -> None:
    with pytest.raises(EnvelopeError, match="'sealed' envelope"):
        PLAIN.decode({"x": {MARKER: {"sealed": "abc"}}}, SLOT)
    with pytest.raises(PayloadCorrupt, match="malformed"):
        PLAIN.decode({MARKER: {"a": 1, "b": 2}}, SLOT)


class Sealing:
    """A stand-in for a codec that seals values (the sensitive-fields one): reversible, and
    visible in what it stores."""

    def encode(self, value: Any, slot: Slot) -> Any:
        return envelope("sealed", {"by": slot.key, "value": value})

    def decode(self, stored: Any, slot: Slot) -> Any:
        return walk(stored, "sealed", lambda body: body["value"])


def test_a_chain_seals_then_offloads_and_reads_back_in_reverse() -> None:
    blobs = MemoryBlobs()
    chain = Chain([Sealing(), Offload(blobs, threshold_bytes=1024)])
    value = {"card": "4111", "pad": "z" * 5000, MARKER: "mine"}

    stored = chain.encode(value, SLOT)

    ref = ref_of(stored)
    assert ref is not None  # the document holds a reference ...
    held = blobs.objects[ref.name].decode()
    assert '"sealed"' in held and '"by":"order-1"' in held  # ... the bucket the sealed value
    assert chain.decode(stored, SLOT) == value
