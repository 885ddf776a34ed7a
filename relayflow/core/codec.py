"""The codec: the one seam where a flow's values (its input, step outputs, result, item outputs)
change form on their way into its document and back.

Every value a flow stores passes ``Codec.encode`` before it is written and ``Codec.decode``
where it is read for a consumer (a handler's context, an output model's check; the api, the
client and the harness read it through the chain without its sealing codec). Codecs chain
(``Chain``): encoding runs them in order, decoding in reverse; the engine's chain is the
sealing codec (``core.sealing.Sealed``) then the offload one (``core.payloads.Offload``), so
the bucket holds sealed values (encrypt, then offload). A ``Slot`` tells a codec whose value
it handles and where in the flow's document it lies.

What a codec writes in a value's place is an *envelope*: a JSON object with the one key
``$relayflow`` whose value names its kind — ``{"$relayflow": {"ref": {...}}}`` for a payload
in the bucket (``core.payloads``), for example. Firestore stores it like any map. A value of a
caller's that happens to hold a ``$relayflow`` key is *escaped* on the way in (wrapped as
``{"$relayflow": {"literal": {...}}}``) and unescaped on the way out, so nothing a caller
sends is ever taken for an envelope: a start input cannot name another flow's payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from relayflow.core.errors import PayloadCorrupt
from relayflow.core.records import FlowRecord

MARKER = "$relayflow"
LITERAL = "literal"


class EnvelopeError(PayloadCorrupt):
    """Raised when a stored value holds an envelope no codec of this deployment reads."""


@dataclass(frozen=True)
class Slot:
    """Whose value a codec handles and where it lies: the flow's key (a ForEach lane's: its
    flow's), when that flow's document was created (its incarnation, so a flow id reused after
    its document expired names fresh objects), its flow's name and version, and the value's
    path in the flow's document, ``("input",)`` or ``("outputs", step)``: what a sealing codec
    seals it as (``core.sealing``). ``scope``: a ForEach lane's values, its ForEach's name (its
    outputs are its item steps')."""

    key: str
    incarnation: str
    flow: str
    version: int
    path: tuple[str, ...]
    scope: str | None = None

    @classmethod
    def of(cls, record: FlowRecord, *path: str) -> Slot:
        """The slot of ``record``'s value at ``path`` (a lane shares its flow's key)."""
        return cls(
            key=record.parent or record.key,
            incarnation=incarnation(record.created_at),
            flow=record.flow,
            version=record.version,
            path=path,
            scope=record.scope if record.is_lane else None,
        )


def incarnation(created_at: datetime) -> str:
    """A flow document's creation time, as the idempotency keys spell it (ms, hex)."""
    return f"{int(created_at.timestamp() * 1000):x}"


class Codec(Protocol):
    """Turns values into their stored form and back (see the module's docstring)."""

    def encode(self, value: Any, slot: Slot) -> Any:
        """The stored form of ``value`` (already escaped: ``escape``)."""
        ...

    def decode(self, stored: Any, slot: Slot) -> Any:
        """``stored`` as its encoder was given it (envelopes of later codecs resolved)."""
        ...


def envelope(kind: str, body: Any) -> dict[str, Any]:
    """The stored form a codec writes in a value's place."""
    return {MARKER: {kind: body}}


def opened(value: Any) -> tuple[str, Any] | None:
    """An envelope's kind and body, or None if ``value`` is not an envelope."""
    if not isinstance(value, dict) or MARKER not in value:
        return None
    inner = value[MARKER]
    if len(value) != 1 or not isinstance(inner, dict) or len(inner) != 1:
        raise EnvelopeError(f"a stored value holds a malformed {MARKER} envelope")
    ((kind, body),) = inner.items()
    return kind, body


def escape(value: Any) -> Any:
    """``value`` with each object that has a ``$relayflow`` key wrapped as a literal."""
    if isinstance(value, dict):
        inner = {k: escape(v) for k, v in value.items()}
        return envelope(LITERAL, inner) if MARKER in value else inner
    if isinstance(value, list):
        return [escape(v) for v in value]
    return value


def unescape(stored: Any) -> Any:
    """``escape`` undone: the value as the caller gave it. An envelope of any other kind left
    here was not decoded by the codec that wrote it: EnvelopeError."""
    if isinstance(stored, dict):
        found = opened(stored)
        if found is None:
            return {k: unescape(v) for k, v in stored.items()}
        kind, body = found
        if kind != LITERAL or not isinstance(body, dict):
            raise EnvelopeError(f"a stored value holds a {kind!r} envelope no codec here reads")
        return {k: unescape(v) for k, v in body.items()}
    if isinstance(stored, list):
        return [unescape(v) for v in stored]
    return stored


def walk(stored: Any, kind: str, open_: Any) -> Any:
    """``stored`` with every envelope of ``kind`` replaced by ``open_(body)`` (which may hold
    envelopes of its own: they are walked too); envelopes of other kinds kept."""
    if isinstance(stored, dict):
        found = opened(stored)
        if found is not None and found[0] == kind:
            return walk(open_(found[1]), kind, open_)
        if found is not None:
            body = found[1]
            inner = {k: walk(v, kind, open_) for k, v in body.items()}
            return envelope(found[0], inner) if isinstance(body, dict) else stored
        return {k: walk(v, kind, open_) for k, v in stored.items()}
    if isinstance(stored, list):
        return [walk(v, kind, open_) for v in stored]
    return stored


class Plain:
    """The codec of a deployment with nothing to offload or seal: escaping only."""

    def encode(self, value: Any, slot: Slot) -> Any:
        return escape(value)

    def decode(self, stored: Any, slot: Slot) -> Any:
        return unescape(stored)


class Chain:
    """Codecs applied in order on the way in, in reverse on the way out, between escaping
    (first in) and unescaping (last out). ``Chain([seal, offload])``: the bucket holds sealed
    values (``Kernel.codec``)."""

    def __init__(self, codecs: Sequence[Codec] = ()) -> None:
        self.codecs = tuple(codecs)

    def encode(self, value: Any, slot: Slot) -> Any:
        stored = escape(value)
        for codec in self.codecs:
            stored = codec.encode(stored, slot)
        return stored

    def decode(self, stored: Any, slot: Slot) -> Any:
        for codec in reversed(self.codecs):
            stored = codec.decode(stored, slot)
        return unescape(stored)


PLAIN = Plain()
