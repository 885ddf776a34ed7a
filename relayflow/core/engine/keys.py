"""The names the engine gives things outside it: effects' idempotency keys, message ids' ids."""

from __future__ import annotations

import hashlib
import re

from relayflow.core.position import FLOW_ID_PATTERN, Position, is_document_id
from relayflow.core.records import FlowRecord


def idempotency_key(record: FlowRecord, position: Position) -> str:
    """The key a handler sends with its external call: one effect per flow, step and effect.

    It names the flow's incarnation (when its document was created), so a flow id reused
    after the old flow's document expired never replays the old flow's effects, and the
    step's effect number, so a retried flow replays an effect that may still be live and
    makes a new one only once the old one was undone. A ForEach item's step names its item
    (``each[7].charge``); its lane shares the flow's id and incarnation, so the flow's undo
    of it sends the key the item sent.
    """
    incarnation = f"{int(record.created_at.timestamp() * 1000):x}"
    suffix = ":undo" if position.undoing else ""
    name = position.effect_name
    effect = _effect_number(record, name)
    flow_id = record.parent or record.key
    return f"relayflow-{flow_id}-{incarnation}-{name}-e{effect}{suffix}"


def _effect_number(record: FlowRecord, name: str) -> int:
    live = record.live_effect(name)
    return live.n if live is not None else sum(1 for e in record.effects if e.step == name)


def safe_id(message_id: str) -> str:
    """A document id for a Pub/Sub message id: itself when it is a legal flow id, else hashed."""
    if re.fullmatch(FLOW_ID_PATTERN[1:-1], message_id) and is_document_id(message_id):
        return message_id
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "_" for c in message_id)[
        :60
    ]
    return f"{safe}-{hashlib.sha256(message_id.encode()).hexdigest()[:12]}"
