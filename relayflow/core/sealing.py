"""Sealed values: a flow's sensitive fields (``core.sensitive``) encrypted on their way to its
document, and opened only for the handlers that read them.

Each sensitive value is replaced by a marker, ``{"$sealed": "v1", "p": [path], "ct": base64}``:
the value's JSON, encrypted by a ``Sealer`` (Tink deterministic AEAD in ``relayflow.gcp.sealer``)
with associated data naming the flow's key and the value's path, so a marker copied to another
flow or another field does not open. Deterministic: the same value at the same place seals to
the same marker, so writing a document again changes nothing that did not change, and a
redelivered start compares equal to the flow it made (it reveals no more than whether one
field of one flow changed between two writes).

Where values are sealed: where they enter a flow, by ``Sealed``, the first codec of the
engine's chain (``core.codec``, ``Kernel.codec``): the start input, each step's output (a
callback's completion, a ForEach's join and its items' outputs in their lanes among them), a
child's input, a kept signal's data. What the engine copies of them (an effect's output, a
callback's run output, the result made of the last steps' outputs) is copied sealed, and
the offload codec after it writes sealed values to the bucket (seal, then offload). Result
events are made from what was written, so Pub/Sub carries markers too. Where they are
opened: where the chain decodes a value for a handler's context or the output model's check,
by the path the marker is found at; in the api, for callers who may read them (``shown``);
in a client holding the key (``opened_result``). A marker is never opened anywhere else: a
task body carries no value.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from relayflow.core import scrubbing, sensitive
from relayflow.core.codec import Slot, escape, unescape
from relayflow.core.errors import SealingUnavailable, UnknownFlow, UnreadableSealedValue
from relayflow.core.flows import Flow, ForEach, Registry
from relayflow.core.records import FlowRecord
from relayflow.core.scrubbing import REDACTED
from relayflow.core.sensitive import ANY, Path
from relayflow.core.values import nodes

SEALED = "$sealed"
VERSION = "v1"
_CONTEXT = b"relayflow/sealed/v1"


class Sealer(Protocol):
    """Deterministic authenticated encryption (Tink's DAEAD, AES-SIV): the port
    ``relayflow.gcp.sealer.TinkSealer`` implements and ``relayflow.testing`` fakes."""

    def seal(self, plaintext: bytes, associated_data: bytes) -> bytes:
        """``plaintext`` encrypted and authenticated with ``associated_data``."""
        ...

    def open(self, ciphertext: bytes, associated_data: bytes) -> bytes:
        """The plaintext; any exception if it was altered or the data does not match."""
        ...


def is_sealed(value: object) -> bool:
    """Whether ``value`` is a sealed value's marker."""
    return isinstance(value, dict) and value.get(SEALED) == VERSION and "ct" in value


def associated_data(owner: str, path: Path) -> bytes:
    """What binds a sealed value to its flow (the key of the flow's document; a ForEach
    lane's flow's) and its path."""
    return b"\x00".join((_CONTEXT, owner.encode(), json.dumps(list(path)).encode()))


def seal_value(sealer: Sealer, value: Any, owner: str, path: Path) -> dict[str, Any]:
    """``value`` (any JSON) as a marker at ``path`` of ``owner``'s flow."""
    plain = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    sealed = sealer.seal(plain.encode(), associated_data(owner, path))
    return {SEALED: VERSION, "p": list(path), "ct": base64.b64encode(sealed).decode("ascii")}


def open_value(sealer: Sealer, marker: dict[str, Any], owner: str, path: Path) -> Any:
    """The value a marker found at ``path`` of ``owner``'s flow holds; UnreadableSealedValue if
    it does not open there (another flow's, another field's, altered, or another key's)."""
    shown = sensitive.text(path)
    if [str(p) for p in marker.get("p") or []] != list(path):
        raise UnreadableSealedValue(f"the sealed value at {shown} was sealed for another field")
    try:
        data = base64.b64decode(str(marker["ct"]), validate=True)
        plain = sealer.open(data, associated_data(owner, path))
        return json.loads(plain)
    except (binascii.Error, ValueError):
        raise UnreadableSealedValue(f"the sealed value at {shown} is malformed") from None
    except Exception:  # the cipher's own error: altered, another flow's, or another key's
        raise UnreadableSealedValue(
            f"the sealed value at {shown} does not open: this service's keyset lacks its key, "
            "or it was altered or moved from another flow"
        ) from None


Seal = Callable[[Any, Path], Any]
Open = Callable[[dict[str, Any], Path], Any]


def sealed_at(value: Any, marks: list[Path], at: Path, seal: Seal) -> Any:
    """``value`` (found at ``at``) with what ``marks`` (relative paths) name in it sealed;
    values already sealed stay as they are. Containers are copied only where they change."""
    if not marks:
        return value
    if () in marks:
        return value if is_sealed(value) else seal(value, at)
    if isinstance(value, dict) and not is_sealed(value):
        return _changed_dict(value, lambda k, v: sealed_at(v, _into(marks, k), (*at, k), seal))
    if isinstance(value, list):
        inner = _into(marks, ANY)
        items = [sealed_at(v, inner, (*at, ANY), seal) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def opened_at(value: Any, at: Path, open_: Open) -> Any:
    """``value`` (found at ``at``) with every marker in it opened by ``open_``."""
    if is_sealed(value):
        return open_(value, at)
    if isinstance(value, dict):
        return _changed_dict(value, lambda k, v: opened_at(v, (*at, k), open_))
    if isinstance(value, list):
        items = [opened_at(v, (*at, ANY), open_) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def redacted(value: Any) -> Any:
    """``value`` with every marker in it replaced by ``"[redacted]"``: what a caller who may
    not read sensitive fields is shown."""
    return opened_at(value, (), lambda marker, at: REDACTED)


def markers(value: Any) -> Iterator[dict[str, Any]]:
    """Every marker in ``value``."""
    return (node for node in nodes(value, stop=is_sealed) if is_sealed(node))


def _into(marks: list[Path], key: str) -> list[Path]:
    return [m[1:] for m in marks if m and m[0] in (key, ANY)]


def _changed_dict(value: dict[str, Any], each: Callable[[str, Any], Any]) -> dict[str, Any]:
    changed = {k: each(k, v) for k, v in value.items()}
    return value if all(changed[k] is v for k, v in value.items()) else changed


def owner_of(record: FlowRecord) -> str:
    """The key a record's sealed values are bound to: its flow's (a lane shares its flow's)."""
    return record.parent or record.key


class Sealing:
    """Seals the sensitive values of the registry's flows, and opens them, with one key.

    ``sealer`` None: this process holds no key; a flow that marks nothing is untouched, and a
    write with a value to seal raises SealingUnavailable rather than store it in clear."""

    def __init__(self, registry: Registry, sealer: Sealer | None = None) -> None:
        self.registry = registry
        self.sealer = sealer

    def marking(self) -> list[str]:
        """The flows (``name vN``) that mark sensitive fields."""
        return [flow.label for flow in self.registry if flow.sensitive_paths]

    def seal(self, flow: Flow, value: Any, *, owner: str, at: Path) -> Any:
        """One value of ``owner``'s flow ``flow``, found at ``at`` (``("input",)``,
        ``("outputs", step)``), with what the flow marks in it sealed (``Sealed``, the codec,
        seals each value a flow stores with it); values sealed already stay as they are."""
        marks = sensitive.under(flow.sensitive_paths, at)
        if not marks:
            return value

        def seal(clear: Any, where: Path) -> Any:
            if self.sealer is None:
                raise SealingUnavailable(
                    f"flow {flow.label} marks {sensitive.text(where)} sensitive and this "
                    "process holds no key to seal it (RELAYFLOW_SENSITIVE_KEYSET)"
                )
            return seal_value(self.sealer, clear, owner, where)

        return sealed_at(value, marks, at, seal)

    def open(self, value: Any, *, owner: str, at: Path) -> Any:
        """``value``, found at ``at`` of ``owner``'s flow (``("input",)``, ``("outputs",
        step)``), with its markers opened: what a handler is told. UnreadableSealedValue if
        one does not open there. Each value opened is noted for scrubbing."""
        sealer = self.sealer
        if sealer is None or not any(True for _ in markers(value)):
            return value

        def open_(marker: dict[str, Any], where: Path) -> Any:
            clear = open_value(sealer, marker, owner, where)
            scrubbing.reveal(clear)  # kept out of what this request writes as text
            return clear

        return opened_at(value, at, open_)

    def reveal(self, flow: Flow, flow_input: dict[str, Any]) -> None:
        """Note ``flow``'s sensitive values in a clear ``flow_input`` (a start message's) for
        the current scope, so that what it logs is scrubbed of them (``core.scrubbing``)."""
        marks = sensitive.under(flow.sensitive_paths, ("input",))
        if marks:
            sealed_at(flow_input, marks, ("input",), lambda value, at: scrubbing.reveal(value))

    def resealed(self, value: Any, *, source: tuple[str, Path], target: tuple[str, Path]) -> Any:
        """``value``'s markers, found at ``source`` (owner, path), sealed again for
        ``target``'s: a parent's input given to its child as the child's input."""
        sealer = self.sealer
        if sealer is None:
            return value
        (owner, base), (to_owner, to_base) = source, target

        def again(marker: dict[str, Any], at: Path) -> Any:
            clear = open_value(sealer, marker, owner, at)
            return seal_value(sealer, clear, to_owner, (*to_base, *at[len(base) :]))

        return opened_at(value, base, again)

    def result_resealed(self, data: Any, *, source: str, target: tuple[str, Path]) -> Any:
        """A child's result ``data`` (sealed for flow ``source``) as its parent's step output
        at ``target`` (owner, path)."""
        sealer = self.sealer
        if sealer is None:
            return data
        to_owner, to_base = target

        def again(marker: dict[str, Any], at: Path) -> Any:
            clear = open_result_value(sealer, marker, source, at)
            return seal_value(sealer, clear, to_owner, (*to_base, *at))

        return opened_at(data, (), again)

    def shown(self, value: Any, owner: str) -> Any:
        """``value`` with its markers opened where they open (for a caller who may read
        sensitive fields), ``"[redacted]"`` where they do not."""
        sealer = self.sealer
        if sealer is None:
            return redacted(value)

        def show(marker: dict[str, Any], at: Path) -> Any:
            path = tuple(str(p) for p in marker.get("p") or [])
            try:
                return open_value(sealer, marker, owner, path)
            except UnreadableSealedValue:
                return REDACTED

        return opened_at(value, (), show)

    def flow_of(self, name: str, version: int) -> Flow | None:
        """The definition whose marks a value of flow ``name`` at ``version`` follows (the
        newest version's, as the engine plans it, once ``version`` is gone); None if the
        registry has none of it."""
        try:
            return self.registry.get(name, version)
        except UnknownFlow:
            try:
                return self.registry.get(name)  # planned with the newest version
            except UnknownFlow:
                return None

    def path_of(self, slot: Slot) -> Path:
        """Where ``slot``'s value lies in its flow's terms (``flow_path``), the path its
        markers are bound to."""
        flow = self.flow_of(slot.flow, slot.version)
        return (flow_path(flow, slot) if flow is not None else None) or slot.path


class Sealed:
    """The sealing codec (``core.codec``): a value's sensitive fields sealed as it enters its
    flow, its markers opened where the chain decodes it for a handler. First in the engine's
    chain (``Kernel.codec``), before the offload codec: what the bucket holds is sealed.

    It works on the value as its caller gave it (``unescape`` first, ``escape`` after), so
    its paths are the flow's own paths; a ``$sealed`` marker is no envelope of the chain's.
    A lane's item step's output is sealed where it ends up in its flow's (``flow_path``)."""

    def __init__(self, sealing: Sealing) -> None:
        self.sealing = sealing

    def encode(self, value: Any, slot: Slot) -> Any:
        if not slot.path:  # a value is sealed as what it is in its flow: never guessed
            raise ValueError(f"a value of flow {slot.flow} to seal has no path")
        flow = self.sealing.flow_of(slot.flow, slot.version)
        where = flow_path(flow, slot) if flow is not None else None
        if flow is None or where is None or not sensitive.under(flow.sensitive_paths, where):
            return value
        return escape(self.sealing.seal(flow, unescape(value), owner=slot.key, at=where))

    def decode(self, stored: Any, slot: Slot) -> Any:
        if not any(True for _ in markers(stored)):
            return stored
        where = self.sealing.path_of(slot)
        return escape(self.sealing.open(unescape(stored), owner=slot.key, at=where))


def flow_path(flow: Flow, slot: Slot) -> Path | None:
    """Where ``slot``'s value lies in ``flow``'s terms, the path its marks are read at: its
    own, but for a ForEach lane's item step's output. A ForEach's output lists its items'
    outputs (each the product of its item steps' last: ``planner.states.product``), so a last
    item step's output is at ``("outputs", each, "items", "*")``, or ``(..., "*", step)``
    with several last steps; an earlier item step's is nowhere in the flow's (None)."""
    path = slot.path
    if slot.scope is None or path[:1] != ("outputs",) or len(path) < 2:
        return path
    each = flow.named(slot.scope) if flow.index_of(slot.scope) is not None else None
    if not isinstance(each, ForEach):
        return None
    sinks = each.item_flow.graph.sinks()
    if path[1] not in sinks:
        return None
    item = ("outputs", slot.scope, "items", ANY)
    return (*item, *(() if len(sinks) == 1 else (path[1],)), *path[2:])


def open_result_value(sealer: Sealer, marker: dict[str, Any], owner: str, at: Path) -> Any:
    """A marker found at ``at`` in a flow's result data: it was sealed as the output of the
    step (or one of the steps) the result is made of, so its path ends with ``at``."""
    path = tuple(str(p) for p in marker.get("p") or [])
    # ("outputs", step, *at): the result of one last step; ("outputs", *at): of several.
    if not path or path[0] != "outputs" or at not in (path[2:], path[1:]):
        raise UnreadableSealedValue(
            f"the sealed value at result.data.{sensitive.text(at)} is not a step output's"
        )
    return open_value(sealer, marker, owner, path)


def opened_result(sealer: Sealer, data: Any, owner: str) -> Any:
    """A flow's result data (from its result event or its document) with its markers opened,
    for a client holding the key (``relayflow.client``)."""
    return opened_at(data, (), lambda m, at: open_result_value(sealer, m, owner, at))
