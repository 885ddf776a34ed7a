"""relayflow.core.engine.focus: the pure questions the engine asks of a stored flow before it
changes it — which track a task is for, whether the next document still fits in Firestore,
whether its result event was marked sent, whether the definition still fits the position.

The flows here are ``tests.unit.planner.sample``'s: ``reserve`` (action) -> ``await_ready``
(poll) -> ``finish`` (action), planned at a fixed NOW.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from relayflow.core import planner
from relayflow.core.engine.focus import (
    MAX_DOC_BYTES,
    ended_by,
    fitting,
    focused_at,
    marked,
    mismatch,
    track_of,
)
from relayflow.core.flows import ActionStep, Flow, ForEach, PollStep
from relayflow.core.kinds import REGISTRY
from relayflow.core.planner import Completed
from relayflow.core.position import MAX_POLL_CHAIN, POLL_CHAIN, Position, TaskKind
from relayflow.core.records import CLEANUP_TRACK, Cleanup, FlowRecord, Result, Track
from relayflow.core.state import Status
from tests.unit.planner.sample import FLOW, NOW, at_poll, noop, plan, started

OK = Result(status=Status.SUCCEEDED, code="OK", message="done")


def ended(**changes: Any) -> FlowRecord:
    """The sample flow, ended SUCCEEDED at ``reserve``."""
    update: dict[str, Any] = {"status": Status.SUCCEEDED, "result": OK, "tracks": {}}
    return started().model_copy(update={**update, **changes})


def cleaning() -> FlowRecord:
    """The sample flow, ended FAILED with its clean-up undoing ``reserve``."""
    undo = Position(step_index=0, step="reserve", kind=TaskKind.COMPENSATE)
    window = Cleanup(since=NOW, until=NOW + timedelta(hours=1), from_position=undo)
    track = Track(position=undo, started_at=NOW)
    failed = Result(status=Status.FAILED, code="DECLINED", message="declined")
    return ended(status=Status.FAILED, result=failed, cleanup=window, tracks={CLEANUP_TRACK: track})


def test_a_task_is_for_the_track_at_its_position_and_any_other_is_stale() -> None:
    record = at_poll()
    assert track_of(record, record.position) == "await_ready"
    other_step = record.position.model_copy(update={"step_index": 2, "step": "finish"})
    assert track_of(record, other_step) is None
    focused = focused_at(record, record.position)
    assert focused is not None and focused.focus == "await_ready"
    assert focused_at(record, other_step) is None


def test_a_later_poll_of_the_chain_is_current_and_one_past_it_or_before_it_is_stale() -> None:
    # Given a flow whose poll step's document was last written at poll 3
    first = at_poll().position.model_copy(update={"poll": 3})
    record = at_poll().model_copy(update={"position": first}).stored()
    at = first.at_poll
    # Then the chain's later polls (no errors or deferrals in a row) are its track's, up to
    # the longest chain a setting may make (a deploy that shortens chains strands none)
    assert track_of(record, at(4)) == "await_ready"
    assert track_of(record, at(3 + POLL_CHAIN - 1)) == "await_ready"
    assert track_of(record, at(3 + MAX_POLL_CHAIN - 1)) == "await_ready"
    # And a poll past the longest chain, an earlier one, or one of an older rescue is not
    assert track_of(record, at(3 + MAX_POLL_CHAIN)) is None
    assert track_of(record, first.model_copy(update={"poll": 2})) is None
    rescued_before = at(4).model_copy(update={"rescue": 1})
    assert track_of(record, rescued_before) is None
    assert track_of(record, at(4).model_copy(update={"attempt": 1})) is None


def test_an_ended_flows_tasks_are_stale_unless_its_clean_up_is_at_them() -> None:
    done = ended()
    assert track_of(done, done.position) is None
    undoing = cleaning()
    undo = undoing.tracks[CLEANUP_TRACK].position
    assert track_of(undoing, undo) == CLEANUP_TRACK
    assert track_of(undoing, undo.model_copy(update={"attempt": 1})) is None


def test_the_commit_that_ends_a_flow_marks_its_result_sent() -> None:
    done = ended()
    assert marked(done).result_published and not done.result_published
    already = ended(result_published=True)
    assert marked(already) is already


@pytest.mark.parametrize(
    "record",
    [at_poll(), ended(result=None), ended(parent="order-7", scope="each", lane=0)],
    ids=["active", "no-result", "lane"],
)
def test_nothing_else_is_marked(record: FlowRecord) -> None:
    assert marked(record) is record


def test_a_flow_ended_by_a_position_is_one_whose_commit_there_marked_its_result() -> None:
    done = marked(ended())
    assert ended_by(done, done.position)
    assert not ended_by(done, done.position.model_copy(update={"attempt": 1}))
    assert not ended_by(ended(), ended().position)  # its result not marked sent
    lane = marked(ended()).model_copy(update={"parent": "order-7", "scope": "each", "lane": 0})
    assert not ended_by(lane, lane.position)  # a lane's end is news for its flow, no event


def test_a_flow_whose_clean_up_began_at_a_position_was_ended_by_it() -> None:
    undoing = cleaning().model_copy(update={"result_published": True})
    assert undoing.cleanup is not None and undoing.cleanup.from_position is not None
    assert ended_by(undoing, undoing.cleanup.from_position)


def test_a_next_document_that_fits_is_written_as_planned() -> None:
    current = started()
    planned = planner.after(plan(), current, Completed({"reservation": "r-1"}))
    assert fitting(plan(), current, planned) is planned


def test_a_next_document_too_large_for_firestore_ends_the_flow_instead() -> None:
    current = started().focused("reserve")
    planned = planner.after(plan(), current, Completed({"blob": "x" * MAX_DOC_BYTES}))
    fitted = fitting(plan(), current, planned)
    assert fitted.status is Status.FAILED
    assert fitted.result is not None and fitted.result.code == "DOCUMENT_TOO_LARGE"
    assert fitted.result.message.startswith("the flow document would be ")
    assert "blob" not in fitted.outputs.get("reserve", {})


def test_a_position_the_definition_still_has_fits() -> None:
    record = at_poll()
    assert mismatch(REGISTRY, FLOW, record.position) == ""


@pytest.mark.parametrize(
    ("position", "why"),
    [
        (
            Position(step_index=3, step="notify", kind=TaskKind.ACTION),
            "flow 'demo' has no step 3 any more",
        ),
        (
            Position(step_index=1, step="await_paid", kind=TaskKind.POLL),
            "step 1 of 'demo' is now 'await_ready'",
        ),
        (
            Position(step_index=1, step="await_ready", kind=TaskKind.ACTION),
            "step 'await_ready' changed kind in 'demo'",
        ),
        (
            Position(step_index=0, step="charge", kind=TaskKind.ACTION, scope="each", item=2),
            "flow 'demo' has no ForEach 'each' any more",
        ),
    ],
    ids=["step-gone", "step-renamed", "kind-changed", "foreach-gone"],
)
def test_a_position_the_definition_no_longer_fits_says_why(position: Position, why: str) -> None:
    assert mismatch(REGISTRY, FLOW, position) == why


def test_an_items_position_is_checked_against_the_foreach_item_steps() -> None:
    each = ForEach("each", items=lambda ctx: [], steps=(ActionStep("charge", noop),))
    flow = Flow(name="batch", steps=(each, PollStep("settle", noop)))
    item = Position(step_index=0, step="charge", kind=TaskKind.ACTION, scope="each", item=2)
    assert mismatch(REGISTRY, flow, item) == ""
    renamed = item.model_copy(update={"step": "pay"})
    assert mismatch(REGISTRY, flow, renamed) == "step 0 of 'each' is now 'charge'"
