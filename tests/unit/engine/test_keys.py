"""relayflow.core.engine.keys: an effect's idempotency key (one per flow incarnation, step and
effect; shared by retries, not by an undo) and a document id for any Pub/Sub message id."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from relayflow.core.engine.keys import idempotency_key, safe_id
from relayflow.core.position import FLOW_ID_PATTERN, Position, TaskKind, is_document_id
from relayflow.core.records import Effect, EffectState, FlowRecord
from relayflow.core.state import Status

from .support import Harness

CREATED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
INCARNATION = f"{int(CREATED.timestamp() * 1000):x}"
CHARGE = Position(step_index=1, step="charge", kind=TaskKind.ACTION)


def test_idempotency_keys_differ_for_a_compensation_but_not_for_a_retry_or_generation(
    h: Harness,
) -> None:
    h.start()
    position = h.record().position
    record = h.record()
    keys = {
        idempotency_key(record, position),
        idempotency_key(record, position.model_copy(update={"kind": TaskKind.COMPENSATE})),
        idempotency_key(record, position.model_copy(update={"generation": 1})),
        idempotency_key(record, position.model_copy(update={"attempt": 2})),
    }
    # Retries, and a new generation while the effect may be live, share a key: the API
    # replays the effect instead of making a second one.
    assert len(keys) == 2


def test_a_flow_id_reused_after_its_document_expired_gets_new_keys(h: Harness) -> None:
    # given a flow, and a later flow under the same id (the first document deleted by TTL)
    h.start()
    first = h.record()
    reborn = first.model_copy(update={"created_at": first.created_at + timedelta(days=31)})
    # then their keys differ, so an API that keeps keys for long does not replay old effects
    assert idempotency_key(first, first.position) != idempotency_key(reborn, reborn.position)


def record(**changes: object) -> FlowRecord:
    base = FlowRecord(
        flow_id="order-7",
        flow="orders",
        input={},
        status=Status.RUNNING,
        position=CHARGE,
        created_at=CREATED,
        updated_at=CREATED,
    )
    return base.model_copy(update=changes)


def effect(state: EffectState, n: int, step: str = "charge") -> Effect:
    return Effect(step=step, n=n, state=state, at=CREATED)


def test_a_key_names_the_flow_its_incarnation_the_step_and_the_effect() -> None:
    assert idempotency_key(record(), CHARGE) == f"relayflow-order-7-{INCARNATION}-charge-e0"
    undo = CHARGE.model_copy(update={"kind": TaskKind.COMPENSATE})
    assert idempotency_key(record(), undo) == f"relayflow-order-7-{INCARNATION}-charge-e0:undo"


def test_a_live_effect_keeps_its_number_and_one_that_is_over_makes_the_next() -> None:
    # an effect that may be live is replayed under its key (a retried flow calls it again) ...
    live = record(effects=[effect(EffectState.UNDONE, 0), effect(EffectState.UNKNOWN, 1)])
    assert idempotency_key(live, CHARGE).endswith("-charge-e1")
    # ... once every earlier one is over (undone, refused), the next is a new one
    over = record(effects=[effect(EffectState.UNDONE, 0), effect(EffectState.REFUSED, 1)])
    assert idempotency_key(over, CHARGE).endswith("-charge-e2")
    others = record(effects=[effect(EffectState.UNDONE, 0, step="reserve")])
    assert idempotency_key(others, CHARGE).endswith("-charge-e0")  # another step's: not counted


def test_an_items_key_names_its_flow_and_item_so_the_flows_undo_sends_the_same() -> None:
    item = Position(step_index=0, step="charge", kind=TaskKind.ACTION, scope="each", item=7)
    lane = record(flow_id="acme~order-7.each.2", parent="acme~order-7", scope="each", lane=2)
    key = f"relayflow-acme~order-7-{INCARNATION}-each[7].charge-e0"
    assert idempotency_key(lane, item) == key
    # the flow undoing the item (after the lanes were gathered) is told the same key
    flow = record(flow_id="order-7", tenant="acme")
    undo = item.model_copy(update={"kind": TaskKind.COMPENSATE})
    assert idempotency_key(flow, undo) == f"{key}:undo"


@pytest.mark.parametrize("message_id", ["1001", "abc_DEF-9", "x" * 100])
def test_a_message_id_that_is_a_legal_flow_id_is_its_own_document_id(message_id: str) -> None:
    assert safe_id(message_id) == message_id


@pytest.mark.parametrize(
    "message_id",
    ["projects/p/messages/1", "__reserved__", "x" * 101, "a.b", ""],
    ids=["path", "reserved", "too-long", "dot", "empty"],
)
def test_any_other_message_id_is_turned_into_a_legal_distinct_one(message_id: str) -> None:
    made = safe_id(message_id)
    assert re.fullmatch(FLOW_ID_PATTERN, made) and is_document_id(made)
    assert made == safe_id(message_id)  # the same message, the same flow
    assert made != safe_id(message_id + "x")


def test_a_message_id_with_non_ascii_letters_is_turned_into_a_legal_one() -> None:
    made = safe_id("é")
    assert re.fullmatch(FLOW_ID_PATTERN, made) and is_document_id(made)


def test_message_ids_that_read_alike_once_cleaned_stay_apart() -> None:
    assert safe_id("a/b") != safe_id("a:b")
    assert safe_id("a/b").startswith("a_b-")


def test_the_same_flow_started_later_is_a_new_incarnation() -> None:
    later = record(created_at=CREATED + timedelta(milliseconds=1))
    assert idempotency_key(later, CHARGE) != idempotency_key(record(), CHARGE)
