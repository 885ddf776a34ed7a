"""Moving a flow between statuses, and its tracks' bookkeeping: the next task of the focused
track, a track ended, all tracks stopped, whether all steps are done and the product."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from relayflow.core.flows import Flow
from relayflow.core.planner.plan import Plan
from relayflow.core.records import FlowRecord, NextTask, Result
from relayflow.core.state import Status, path_to


def move(plan: Plan, record: FlowRecord, status: Status) -> FlowRecord:
    path_to(record.status, status)  # raises InvalidTransition: never written
    return record.model_copy(update={"status": status, "updated_at": plan.now})


def finish(plan: Plan, record: FlowRecord, result: Result) -> FlowRecord:
    moved = move(plan, record, result.status)
    return moved.model_copy(
        update={
            "result": result,
            "pending_result": None,
            "tracks": {},
            "focus": None,
            "next": None,
            "claim": None,
            "next_run_at": None,
            "aside_until": None,
            "finished_at": plan.now,
            "expire_at": plan.now + timedelta(seconds=plan.retention_s),
            # This generation's event has not gone out yet, whatever an earlier one did.
            "result_published": False,
            # A flow that succeeded is held up by no dependency (one that failed keeps the
            # failing step's, set when it began to fail).
            "dependency": record.dependency if result.status is not Status.SUCCEEDED else None,
        }
    )


def with_next(record: FlowRecord, nxt: NextTask) -> FlowRecord:
    """The focused track with its next task (a task made anew: the sweeper watches it)."""
    return record.model_copy(update={"next": nxt, "aside_until": None})


def stop_all(record: FlowRecord) -> FlowRecord:
    return record.model_copy(update={"tracks": {}, "focus": None})


def end_track(record: FlowRecord, key: str) -> FlowRecord:
    tracks = {k: t for k, t in record.tracks.items() if k != key}
    return record.model_copy(update={"tracks": tracks})


def all_done(flow: Flow, record: FlowRecord) -> bool:
    over = set(record.outputs) | set(record.skipped)
    return not record.tracks and all(step.name in over for step in flow.steps)


def product(flow: Flow, record: FlowRecord) -> dict[str, Any]:
    sinks = _sinks(flow, record)
    if len(sinks) == 1:
        data: dict[str, Any] = record.outputs[sinks[0]]
        return data
    return {sink: record.outputs[sink] for sink in sinks}


def product_path(flow: Flow, record: FlowRecord) -> tuple[str, ...]:
    """Where ``product``'s data lies in the flow's document: the output of its one last step,
    or the outputs (by step) of several."""
    sinks = _sinks(flow, record)
    return ("outputs", sinks[0]) if len(sinks) == 1 else ("outputs",)


def _sinks(flow: Flow, record: FlowRecord) -> list[str]:
    return [s for s in flow.graph.sinks() if s in record.outputs]


def past_deadline(plan: Plan, record: FlowRecord, when: datetime) -> bool:
    """Whether ``when`` is past the flow's own deadline (the start message's ``deadline_s``)."""
    return record.deadline_at is not None and when > record.deadline_at
