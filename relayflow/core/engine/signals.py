"""Signals: a named event sent to a flow by its id, for its WaitForSignal steps.

The by-name sibling of a callback token (``engine.callbacks``). A signal for a step that waits
ends it in this write; one that comes before the flow reaches the step is kept on the flow's
document (``FlowRecord.signals``, bounded) and consumed when it gets there
(``kinds.signal``). A signal id makes a resend a no-op. A signal for an ended flow, an unknown
flow, or a name no WaitForSignal of the flow's definition waits for changes nothing, and the
answer says why. A flow outside the caller's tenant scope is answered as an unknown one.

A WaitForSignal inside a ForEach is an item's: the signal names the item (``item``) and goes
to the item's lane, kept there if the item has not reached the step yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from relayflow.core.codec import Slot, escape
from relayflow.core.engine.focus import fitting
from relayflow.core.engine.kernel import Kernel
from relayflow.core.errors import InvalidMessage, UnknownFlow
from relayflow.core.flows import SIGNAL_NAME_PATTERN, Flow
from relayflow.core.kinds import Kinds
from relayflow.core.kinds.foreach import lane_of
from relayflow.core.kinds.signal import (
    MAX_PENDING,
    MAX_REASON,
    MAX_SIGNAL_BYTES,
    MAX_SIGNAL_ID,
    delivered,
    remembered,
    signal_steps,
    waiting_names,
)
from relayflow.core.records import FlowRecord, PendingSignal
from relayflow.core.state import ACTIVE, TERMINAL, Status
from relayflow.core.values import UnstorableValue, check_storable

_NAME = re.compile(SIGNAL_NAME_PATTERN)
_SIGNAL_ID = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.:@-]{{0,{MAX_SIGNAL_ID - 1}}}$")


class Signalled(StrEnum):
    """What sending a signal did."""

    DELIVERED = "delivered"  # a step waited for it: it ended with it, the flow moved on
    KEPT = "kept"  # no step waits for it yet: kept, consumed when the flow gets there
    DUPLICATE = "duplicate"  # its signal id was taken already: nothing changed
    IGNORED = "ignored"  # nothing will ever wait for it (see ``code``): nothing changed


@dataclass(frozen=True)
class SignalAnswer:
    outcome: Signalled
    reason: str = ""
    flow_id: str | None = None
    # Why it was ignored: FLOW_NOT_FOUND, FLOW_ENDED, UNKNOWN_SIGNAL, ITEM_NEEDED,
    # NOT_AWAITED (its steps are done), TOO_MANY_PENDING, NOT_STARTED (a ForEach's).
    code: str = ""


class SignalTooLarge(InvalidMessage):
    """A signal's data is over ``MAX_SIGNAL_BYTES`` (the api answers 413)."""


def checked_signal(
    name: str, data: Any, *, signal_id: str | None, reason: str
) -> tuple[str, dict[str, Any], str | None, str]:
    """The signal as given, or InvalidMessage (SignalTooLarge) naming what is wrong."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidMessage(f"a signal's name must match {SIGNAL_NAME_PATTERN}, got {name!r}")
    if not isinstance(data, dict):
        raise InvalidMessage(f"a signal's data must be a JSON object, not {type(data).__name__}")
    try:
        check_storable(data, where="the signal's data", max_bytes=MAX_SIGNAL_BYTES)
    except UnstorableValue as exc:
        raised = SignalTooLarge if "bytes; the limit is" in str(exc) else InvalidMessage
        raise raised(str(exc)) from None
    if signal_id is not None and (
        not isinstance(signal_id, str) or not _SIGNAL_ID.match(signal_id)
    ):
        raise InvalidMessage(
            f"a signal id is 1..{MAX_SIGNAL_ID} letters, digits or _.:@- (starting with a "
            f"letter or digit), got {signal_id!r}"[:300]
        )
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise InvalidMessage(f"a signal's reason is a string of at most {MAX_REASON} characters")
    # Escaped as every value a flow stores is (``core.codec``): it becomes a step's output.
    return name, escape(data), signal_id, reason


class Signals:
    """Sends signals to flows."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def send(
        self,
        record: FlowRecord | None,
        flow_id: str,
        signal: PendingSignal,
    ) -> SignalAnswer:
        """Send ``signal`` to ``record`` (None: no flow the caller may see has ``flow_id``)."""
        if record is None:
            return _ignored("FLOW_NOT_FOUND", f"no flow with id {flow_id!r}", flow_id)
        if _taken(record, signal):
            # Before the flow's end is looked at: a sender that resends after a lost answer
            # hears that its signal was taken, even once the flow it ended has ended.
            return _duplicate(signal, flow_id)
        if record.status in TERMINAL:
            why = f"the flow has ended ({record.status}): no step of it waits for a signal"
            return _ignored("FLOW_ENDED", why, flow_id)
        try:
            flow = self._k.definition(record)[0]
        except UnknownFlow as exc:
            return _ignored("UNKNOWN_FLOW", str(exc), flow_id)
        scopes = {
            scope
            for scope, step in signal_steps(flow, self._k.kinds)
            if signal.name in step.signals
        }
        if not scopes:
            names = sorted(
                {n for _, step in signal_steps(flow, self._k.kinds) for n in step.signals}
            )
            waits = f"it waits for: {', '.join(names)}" if names else "it waits for none"
            why = (
                f"no WaitForSignal step of flow {record.flow!r} waits for {signal.name!r} ({waits})"
            )
            return _ignored("UNKNOWN_SIGNAL", why, flow_id)
        if signal.item is None:
            if None not in scopes:
                inside = ", ".join(sorted(s for s in scopes if s))
                why = (
                    f"{signal.name!r} is waited for by the items of ForEach {inside}: name the item"
                )
                return _ignored("ITEM_NEEDED", why, flow_id)
            return self._to(record.key, flow, flow_id, signal)
        scope = next((s for s in sorted(scopes, key=str) if s is not None), None)
        if scope is None:
            why = f"{signal.name!r} is waited for by the flow itself, not by a ForEach's items"
            return _ignored("UNKNOWN_SIGNAL", why, flow_id)
        return self._to_item(record, flow, scope, flow_id, signal)

    def _to_item(
        self, record: FlowRecord, flow: Flow, scope: str, flow_id: str, signal: PendingSignal
    ) -> SignalAnswer:
        """A signal for item ``signal.item`` of ForEach ``scope``: to the item's lane."""
        track = record.tracks.get(scope)
        fan = track.fanout if track is not None else None
        if fan is None or not record.lanes:
            if scope in record.outputs:
                return _ignored("NOT_AWAITED", f"ForEach {scope!r} is done", flow_id)
            why = f"ForEach {scope!r} has not started its items yet: send it once it has"
            return _ignored("NOT_STARTED", why, flow_id)
        assert signal.item is not None
        if not 0 <= signal.item < fan.total:
            why = f"ForEach {scope!r} has {fan.total} items: there is no item {signal.item}"
            return _ignored("NOT_AWAITED", why, flow_id)
        lane_id = lane_of(record, scope, signal.item % fan.lanes)
        if lane_id is None:
            why = f"ForEach {scope!r} has not started its items yet: send it once it has"
            return _ignored("NOT_STARTED", why, flow_id)
        return self._to(lane_id, self._k.kinds.inner(flow, scope), flow_id, signal)

    def _to(self, key: str, flow: Flow, flow_id: str, signal: PendingSignal) -> SignalAnswer:
        """Deliver or keep ``signal`` in one write of document ``key`` (planned with
        ``flow``: a lane's item steps)."""
        found = self._k.read(key)
        if found is None:
            return _ignored("FLOW_NOT_FOUND", f"no flow with id {flow_id!r}", flow_id)
        plan = self._k.plan(flow)
        said: list[SignalAnswer] = []

        def apply(latest: FlowRecord) -> FlowRecord | None:
            said[:] = [answer_for(latest, flow, signal, flow_id, self._k)]
            answer = said[0]
            if answer.outcome is Signalled.DELIVERED:
                waiting = waiting_names(latest, flow, self._k.kinds)
                at = next(k for k, names in waiting.items() if signal.name in names)
                current = latest.focused(at)
                sent = self._sealed(signal, current, current.position.step)
                current = current.model_copy(update={"signals": [*current.signals, sent]})
                return fitting(plan, current, delivered(plan, current, sent).stored())
            if answer.outcome is Signalled.KEPT:
                ids = remembered(latest.signal_ids, signal.signal_id)
                waiter = waiter_of(flow, signal.name, self._k.kinds)
                kept = self._sealed(signal, latest, waiter)
                kept_record = latest.model_copy(
                    update={"signals": [*latest.signals, kept], "signal_ids": ids}
                )
                return kept_record.stored()
            return None

        self._k.write(found, apply)  # the store applies it to the latest document
        return said[0] if said else _ignored("FLOW_NOT_FOUND", "the flow is gone", flow_id)

    def _sealed(self, signal: PendingSignal, record: FlowRecord, step: str) -> PendingSignal:
        """``signal`` with its data sealed as step ``step``'s output's ``data`` is (where the
        flow marks it: ``core.sealing``; the codec's first link only: signals stay small)."""
        data = self._k.sealed.encode(signal.data, Slot.of(record, "outputs", step, "data"))
        return signal if data is signal.data else signal.model_copy(update={"data": data})


def waiter_of(flow: Flow, name: str, kinds: Kinds) -> str:
    """The step a kept signal ``name`` is sealed for: the first of ``flow``'s own that waits
    for it (the one it reaches first)."""
    waiters = (s for scope, s in signal_steps(flow, kinds) if scope is None and name in s.signals)
    return next(waiters).name


def _item_fits(record: FlowRecord, signal: PendingSignal) -> bool:
    return signal.item is None or record.item_index == signal.item


def answer_for(
    record: FlowRecord, flow: Flow, signal: PendingSignal, flow_id: str, kernel: Kernel
) -> SignalAnswer:
    """What ``signal`` does to ``record`` (a flow's document, or a lane's): pure."""
    if _taken(record, signal):
        return _duplicate(signal, flow_id)
    if record.status not in ACTIVE:
        if record.is_lane:
            return _ignored("NOT_AWAITED", f"item {signal.item} is done", flow_id)
        return _ignored("FLOW_ENDED", f"the flow has ended ({record.status})", flow_id)
    if record.status is Status.COMPENSATING:
        return _ignored("FLOW_ENDED", "the flow is being undone; it awaits no signal", flow_id)
    waiting = waiting_names(record, flow, kernel.kinds)
    if _item_fits(record, signal) and any(signal.name in n for n in waiting.values()):
        return SignalAnswer(Signalled.DELIVERED, "", flow_id)
    if not _still_awaited(record, flow, signal):
        why = f"the steps that wait for {signal.name!r} are done: nothing will take it"
        return _ignored("NOT_AWAITED", why, flow_id)
    if len(record.signals) >= MAX_PENDING:
        why = f"the flow keeps at most {MAX_PENDING} signals it has not reached yet"
        return _ignored("TOO_MANY_PENDING", why, flow_id)
    return SignalAnswer(Signalled.KEPT, "no step waits for it yet: kept until one does", flow_id)


def _taken(record: FlowRecord, signal: PendingSignal) -> bool:
    """Whether ``record`` took ``signal``'s id already (delivered, or kept for later)."""
    return signal.signal_id is not None and (
        signal.signal_id in record.signal_ids
        or any(s.signal_id == signal.signal_id for s in record.signals)
    )


def _duplicate(signal: PendingSignal, flow_id: str) -> SignalAnswer:
    why = f"signal id {signal.signal_id!r} was taken already: nothing changed"
    return SignalAnswer(Signalled.DUPLICATE, why, flow_id, "DUPLICATE")


def _still_awaited(record: FlowRecord, flow: Flow, signal: PendingSignal) -> bool:
    """Whether a step that waits for ``signal`` may still reach it: it is not done or skipped
    (for a lane: the item is this one or a later one of the lane's)."""
    over = set(record.outputs) | set(record.skipped)
    steps = [s for s in flow.steps if signal.name in getattr(s, "signals", ())]
    if not record.is_lane:
        return any(s.name not in over for s in steps)
    ahead = [i["index"] for i in record.items[record.cursor :]]
    if signal.item not in ahead:
        return False
    if signal.item != record.item_index:
        return True
    return any(s.name not in over for s in steps)


def _ignored(code: str, reason: str, flow_id: str | None) -> SignalAnswer:
    return SignalAnswer(Signalled.IGNORED, reason, flow_id, code)
