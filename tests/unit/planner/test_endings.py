"""relayflow.core.planner.endings: a flow that cannot be planned any further ends — aborted
(undoing nothing), its definition gone (undone with the newest one's compensations), its type
not deployed (undoing nothing, naming what stays behind) — and its result event is marked sent
or not, for its own generation only.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from relayflow.core import planner
from relayflow.core.kinds import REGISTRY
from relayflow.core.planner import Completed, Plan
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import CLEANUP_TRACK, Cleanup, CleanupState, FlowRecord, Track
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, QUEUES, at_poll, plan

NO_DEFINITION = Plan(definition=None, queues=QUEUES, now=NOW, kinds=REGISTRY)


def test_an_aborted_flow_fails_at_once_undoing_nothing() -> None:
    polling = at_poll()
    aborted = planner.abort(plan(), polling, code="DOCUMENT_TOO_LARGE", message="too big")
    assert aborted.status is Status.FAILED and aborted.tracks == {}
    assert aborted.result is not None
    assert (aborted.result.code, aborted.result.message) == ("DOCUMENT_TOO_LARGE", "too big")
    assert aborted.result.error == {
        "code": "DOCUMENT_TOO_LARGE",
        "message": "too big",
        "step": "await_ready",
        "attempt": 0,
    }
    assert aborted.history[-1].outcome == "aborted"
    assert [e.state for e in aborted.effects] == [e.state for e in polling.effects]  # not undone


def test_a_flow_whose_version_is_gone_is_undone_with_the_newest_compensations() -> None:
    gone = planner.definition_gone(plan(), at_poll(), message="version 1 is gone")
    assert gone.status is Status.COMPENSATING
    assert (gone.position.step, gone.position.kind) == ("reserve", "compensate")
    assert gone.pending_result is not None
    assert (gone.pending_result.code, gone.pending_result.message) == (
        "DEFINITION_CHANGED",
        "version 1 is gone",
    )
    assert gone.history[-1].outcome == "definition changed"
    undone = planner.after(plan(), gone, Completed({}))
    assert undone.status is Status.FAILED
    assert undone.result is not None and undone.result.code == "DEFINITION_CHANGED"


def test_a_flow_of_a_type_not_deployed_fails_naming_what_it_left_behind() -> None:
    ended = planner.unknown_flow(NO_DEFINITION, at_poll(), message="no deployed version")
    assert ended.status is Status.FAILED and ended.tracks == {}
    assert ended.result is not None and ended.result.code == "UNKNOWN_FLOW"
    assert ended.result.error is not None and ended.result.error["not_undone"] == ["reserve"]
    assert ended.history[-1].outcome == "unknown flow"


def cleaning() -> FlowRecord:
    """The sample flow, ended FAILED, its clean-up undoing ``reserve``."""
    failed = planner.unknown_flow(plan(), at_poll(), message="ended")
    undo = Position(step_index=0, step="reserve", kind=TaskKind.COMPENSATE)
    window = Cleanup(since=NOW, until=NOW + timedelta(hours=1))
    tracks = {CLEANUP_TRACK: Track(position=undo, started_at=NOW)}
    return failed.model_copy(update={"cleanup": window, "tracks": tracks}).focused(CLEANUP_TRACK)


def test_an_ending_of_a_clean_up_gives_only_the_clean_up_up() -> None:
    endings: list[Callable[[FlowRecord], FlowRecord]] = [
        lambda r: planner.abort(plan(), r, code="X", message="stop"),
        lambda r: planner.definition_gone(plan(), r, message="stop"),
        lambda r: planner.unknown_flow(plan(), r, message="stop"),
    ]
    for end in endings:
        record = cleaning()
        given_up = end(record)
        assert given_up.status is Status.FAILED
        assert given_up.result == record.result  # how the flow ended is unchanged
        assert given_up.cleanup is not None and given_up.cleanup.state is CleanupState.ABANDONED
        assert given_up.cleanup.left == ["reserve"] and given_up.cleanup.reason == "stop"


def test_a_result_is_marked_sent_for_its_own_generation_once() -> None:
    ended = planner.abort(plan(), at_poll(), code="X", message="stop")
    marked = planner.published(ended, generation=0)
    assert marked is not None and marked.result_published
    assert planner.published(marked, generation=0) is None  # marked already
    assert planner.published(ended, generation=1) is None  # retried since: not this one
    assert planner.published(at_poll(), generation=0) is None  # not ended


def test_a_result_is_unmarked_for_its_own_generation_if_it_was_marked() -> None:
    marked = planner.published(
        planner.abort(plan(), at_poll(), code="X", message="s"), generation=0
    )
    assert marked is not None
    unmarked = planner.unpublished(marked, generation=0)
    assert unmarked is not None and not unmarked.result_published
    assert planner.unpublished(unmarked, generation=0) is None
    assert planner.unpublished(marked, generation=1) is None
