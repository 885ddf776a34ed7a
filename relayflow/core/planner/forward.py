"""The dispatcher: the record once a task's outcome is taken into account.

An undo's outcome is the saga's (``saga``); a task run forward is its kind's (``Plan.kinds``:
``relayflow.core.kinds``), which builds on what every kind shares here: a step done
(``advance``), failed for good (``fail``), or misused (``misused``).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from relayflow.core import scrubbing
from relayflow.core.codec import Slot
from relayflow.core.errors import InvalidTransition, PermanentError
from relayflow.core.messages import bounded, describe
from relayflow.core.planner.cleanup import clean_up_after
from relayflow.core.planner.effects import forget_first_try
from relayflow.core.planner.history import error_of, log, new_entry, timeout_of
from relayflow.core.planner.lanes import item_done
from relayflow.core.planner.plan import Outcome, Plan, dependency_at
from relayflow.core.planner.reset import after_undo
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.starts import start_ready
from relayflow.core.planner.states import (
    all_done,
    end_track,
    finish,
    move,
    past_deadline,
    product,
    product_path,
)
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord, Result
from relayflow.core.sealing import is_sealed
from relayflow.core.state import Status


def after(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """The record once ``outcome`` of the task at the focused track is taken into account.

    ``record`` is focused on the track the task ran on; the claim that delivery held ends.
    """
    if record.focus is None:  # no track: the flow has ended (or is not focused on one)
        raise InvalidTransition(f"no step of flow {record.flow_id} is running ({record.status})")
    return follow(plan, record.model_copy(update={"claim": None}), outcome).stored()


def follow(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """``after``, once its claim has ended: an undo's outcome is the saga's (or a reset's); a
    task run forward is its kind's to take into account (a callback's early completion comes
    back here)."""
    if record.position.kind is TaskKind.COMPENSATE:
        return after_undo(plan, record, outcome)
    return plan.kinds.at(plan.flow, record.position).after(plan, record, outcome)


def fail(plan: Plan, record: FlowRecord, error: PermanentError) -> FlowRecord:
    """The focused task failed for good: the flow ends FAILED, once its effects are undone."""
    record = forget_first_try(record)
    return begin_failure(plan, record, Status.FAILED, error_of(record, error), "failed")


def misused(plan: Plan, record: FlowRecord) -> FlowRecord:
    """A task that may not wait said not ready: NotReady from an action is a bug in the
    handler, and retrying would not change it."""
    misuse = PermanentError("an action step raised NotReady", code="NOT_READY_IN_ACTION")
    return begin_failure(plan, record, Status.FAILED, error_of(record, misuse), "failed")


def advance(
    plan: Plan, record: FlowRecord, output: dict[str, Any], *, seen: str = "ready"
) -> FlowRecord:
    """The focused step is done with ``output`` (its history entry says ``seen``): its track
    ends, and every step that became ready starts."""
    pos = record.position
    entry = new_entry(plan, record, seen)
    # The step a put-off held up is done: the flow is no longer held up by its dependency.
    held = record.dependency is not None and record.dependency == dependency_at(plan, pos)
    record = log(plan, record, entry).model_copy(
        update={
            "outputs": {**record.outputs, pos.step: output},
            "dependency": None if held else record.dependency,
        }
    )
    record = end_track(record, pos.step)
    if record.is_lane and all_done(plan.flow, record):
        return item_done(plan, record)
    if all_done(plan.flow, record):
        # The product: the output of the step nothing runs after (each one's, if several).
        data = product(plan.flow, record)
        mismatch = output_mismatch(plan, record, data)
        if mismatch is not None:
            err = error_of(record, mismatch)
            return begin_failure(plan, record, Status.FAILED, err, "output invalid")
        result = Result(status=Status.SUCCEEDED, code="OK", message="flow completed", data=data)
        return clean_up_after(plan, finish(plan, record, result))
    more = plan.flow.graph.ready(record.outputs, record.skipped, record.tracks)
    if more and past_deadline(plan, record, plan.now):
        err = timeout_of(record, "DEADLINE_EXCEEDED", "the flow's deadline passed before a step")
        return begin_failure(plan, record, Status.TIMED_OUT, err, "deadline passed")
    moved = move(plan, record, Status.RUNNING)
    return start_ready(plan, moved, generation=pos.generation)


def output_mismatch(plan: Plan, record: FlowRecord, data: dict[str, Any]) -> PermanentError | None:
    """Why the output a flow would succeed with does not fit its ``output_model`` (as its
    consumers will read it: offloaded values resolved, sealed ones opened), or None. What it
    opens is kept out of the message (``core.scrubbing``); a value no key here opens is not
    checked (``is_sealed``)."""
    flow = plan.flow
    if flow.output_model is None:
        return None
    with scrubbing.revealing():
        try:
            slot = Slot.of(record, *product_path(flow, record))
            flow.output_model.model_validate(plan.codec.decode(data, slot))
        except ValidationError as exc:
            problems = describe(exc, skip=is_sealed)
            if not problems:
                return None
            message = f"the output of {flow.label} is not a {flow.output_model.__name__}: "
            shown = scrubbing.scrubbed(message + bounded(problems))
            return PermanentError(shown, code="OUTPUT_INVALID")
        except PermanentError as unreadable:  # its payload is gone or does not match
            return unreadable
    return None
