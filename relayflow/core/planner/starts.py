"""Starting steps: a new flow's first steps, and, after any step, every step that became ready
(one track each, so steps with no path between them run in parallel)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from relayflow.core.planner.chain import due_at_chain_end, first_chain_end
from relayflow.core.planner.claims import first_claims
from relayflow.core.planner.plan import Plan, schedule
from relayflow.core.position import Position
from relayflow.core.records import FlowRecord, Track
from relayflow.core.state import Status


def start_ready(
    plan: Plan, record: FlowRecord, *, generation: int, delay_s: float = 0.0
) -> FlowRecord:
    """A track, due now (or ``delay_s`` from now), for each step that may start: not done,
    skipped or running, and all it runs after done or skipped."""
    flow = plan.flow
    ready = flow.graph.ready(record.outputs, record.skipped, record.tracks)
    tracks = dict(record.tracks)
    for name in ready:
        index = flow.index_of(name)
        assert index is not None
        kind = plan.kinds.of(flow.step(index))
        position = Position(
            generation=generation,
            step_index=index,
            step=name,
            kind=kind.forward,
            scope=record.scope,  # in a lane: the ForEach and the item
            item=record.item_index,
        )
        nxt = schedule(plan, record, position, delay_s)
        token = callback_token(plan, record, name, generation) if kind.hands_token else None
        tracks[name] = Track(position=position, next=nxt, started_at=plan.now, token=token)
    started = record.model_copy(update={"tracks": tracks, "focus": None, "aside_until": None})
    if ready:  # the record's position names the step last started
        started = started.model_copy(update={"position": tracks[ready[-1]].position})
        # A poll step's first polls write nothing (a chain): the flow is due at its end.
        first = tracks[ready[-1]].next
        assert first is not None
        started = due_at_chain_end(started, first_chain_end(plan, started, first))
    return started.stored()


def callback_token(plan: Plan, record: FlowRecord, step: str, generation: int) -> str:
    """A one-use callback token: it names its flow (so a completion finds the document) and is
    unguessable (the plan's nonce); the track keeps it, which binds it to the step and the
    generation."""
    seed = f"{plan.nonce}|{record.key}|{record.created_at.isoformat()}|{step}|{generation}"
    return f"{record.key}.{hashlib.sha256(seed.encode()).hexdigest()[:40]}"


def new_record(
    plan: Plan,
    *,
    flow_id: str,
    input: dict[str, Any],
    message_id: str | None,
    deadline_s: float | None,
    tenant: str = "default",
    priority: str = "low",
    waiting: bool = False,
    first_lease_s: float | None = None,
    labels: dict[str, str] | None = None,
) -> FlowRecord:
    """A PENDING flow whose first steps (those that run after nothing) are due now; or, if
    its tenant has no room (``waiting``), one that holds no task until it is admitted.

    ``first_lease_s``: the first steps that are claimed are claimed for their tasks' first
    dispatch for this long (``claims.first_claims``), so that delivery writes no claim of its
    own (None: each delivery claims)."""
    flow = plan.flow
    first = first_position(plan)
    deadline_at = plan.now + timedelta(seconds=deadline_s) if deadline_s else None
    record = FlowRecord(
        flow_id=flow_id,
        flow=flow.name,
        version=flow.version,
        input=input,
        status=Status.PENDING,
        position=first,
        deadline_at=deadline_at,
        message_id=message_id,
        created_at=plan.now,
        updated_at=plan.now,
        tenant=tenant,
        priority=priority,
        labels=labels or {},
    )
    # Its queue shard, for good: every task of the flow goes to that shard's queues.
    record = record.model_copy(update={"queue_shard": plan.queues.shard_of(record.key)})
    if waiting:
        return record.model_copy(update={"admission": "waiting", "queued_at": plan.now})
    started = start_ready(plan, record, generation=0)
    if first_lease_s is None:
        return started
    return first_claims(plan, started, lease_s=first_lease_s)


def first_position(plan: Plan) -> Position:
    """Where a flow (or a lane, whose plan is for its item steps) starts: its first step."""
    first = plan.flow.step(0)
    return Position(step_index=0, step=first.name, kind=plan.kinds.of(first).forward)
