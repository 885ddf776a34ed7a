"""relayflow.core.planner.effects: what a flow's actions may have done in the world — noted as
begun before each call, marked done or refused, and undone newest first by the steps that can
undo them.

The flow under test is ``tests.unit.planner.sample``'s (see there): ``reserve`` can be undone,
``finish`` cannot.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from relayflow.core.errors import UnknownFlow
from relayflow.core.flows import ActionStep, Flow, ForEach
from relayflow.core.kinds import REGISTRY
from relayflow.core.planner import Plan, adopted, begin_effect
from relayflow.core.planner.effects import (
    effect_done,
    forget_first_try,
    index_in,
    next_compensation,
    undo_position,
)
from relayflow.core.position import TaskKind
from relayflow.core.records import Effect, EffectState, FlowRecord
from tests.unit.planner.sample import NOW, QUEUES, at_finish, noop, plan, started


def effect(
    step: str, state: EffectState = EffectState.DONE, *, at_s: float = 0, n: int = 0
) -> Effect:
    return Effect(step=step, n=n, state=state, at=NOW + timedelta(seconds=at_s))


def with_effects(*effects: Effect) -> FlowRecord:
    return at_finish().model_copy(update={"effects": list(effects)})


def test_an_actions_effect_is_noted_as_begun_before_the_call() -> None:
    record = begin_effect(plan(), started())
    (begun,) = record.effects
    assert (begun.step, begun.n, begun.state, begun.at) == ("reserve", 0, EffectState.UNKNOWN, NOW)


def test_an_effect_that_may_be_live_is_kept_and_a_new_one_numbered_after_those_over() -> None:
    live = with_effects(effect("reserve", EffectState.UNKNOWN)).model_copy(
        update={"position": started().position}
    )
    assert begin_effect(plan(), live) is live  # its call finds it rather than making a second
    over = live.model_copy(
        update={
            "effects": [
                effect("reserve", EffectState.UNDONE),
                effect("reserve", EffectState.REFUSED, n=1),
            ]
        }
    )
    assert begin_effect(plan(), over).effects[-1].n == 2


def test_a_completed_action_marks_its_effect_done_with_what_it_answered() -> None:
    record = begin_effect(plan(), started())
    done = effect_done(plan(NOW + timedelta(seconds=3)), record, "reserve", {"id": "r-1"})
    (marked,) = done.effects
    assert (marked.state, marked.done_at, marked.output) == (
        EffectState.DONE,
        NOW + timedelta(seconds=3),
        {"id": "r-1"},
    )
    unbegun = effect_done(plan(), started(), "reserve", {"id": "r-2"})  # begun if it was not
    assert [(e.state, e.output) for e in unbegun.effects] == [(EffectState.DONE, {"id": "r-2"})]


def test_a_first_try_refused_for_good_never_happened() -> None:
    record = begin_effect(plan(), started())
    refused = forget_first_try(record)
    assert [e.state for e in refused.effects] == [EffectState.REFUSED]


@pytest.mark.parametrize(
    "changes",
    [{"attempt": 1}, {"uncommitted": 1}, {"generation": 1}],
    ids=["a-later-try", "an-earlier-delivery-crashed", "begun-by-an-earlier-generation"],
)
def test_a_refusal_after_a_try_that_may_have_landed_keeps_the_effect(
    changes: dict[str, int],
) -> None:
    record = begin_effect(plan(), started())
    if "uncommitted" in changes:
        record = record.model_copy(update=changes)
    else:
        record = record.model_copy(update={"position": record.position.model_copy(update=changes)})
    assert [e.state for e in forget_first_try(record).effects] == [EffectState.UNKNOWN]


def saga() -> Plan:
    """a and b can be undone; c cannot."""
    steps = (
        ActionStep("a", noop, compensate=noop),
        ActionStep("b", noop, compensate=noop),
        ActionStep("c", noop),
    )
    return Plan(definition=Flow(name="saga", steps=steps), queues=QUEUES, now=NOW, kinds=REGISTRY)


def test_the_newest_effect_that_can_be_undone_is_undone_first() -> None:
    record = with_effects(effect("a", at_s=1), effect("b", at_s=2), effect("c", at_s=3))
    found = next_compensation(saga(), record, item=None)
    assert found is not None and found.step == "b"  # c is newer, but nothing undoes it
    undone = with_effects(effect("a", at_s=1), effect("b", EffectState.UNDONE, at_s=2))
    found = next_compensation(saga(), undone, item=None)
    assert found is not None and found.step == "a"
    assert next_compensation(saga(), with_effects(effect("c")), item=None) is None


def test_effects_of_one_instant_are_undone_in_the_reverse_of_their_recording() -> None:
    record = with_effects(effect("b"), effect("a"))
    found = next_compensation(saga(), record, item=None)
    assert found is not None and found.step == "a"


def test_an_effect_of_a_step_the_definition_no_longer_has_cannot_be_undone() -> None:
    assert next_compensation(plan(), with_effects(effect("renamed")), item=None) is None


def test_which_states_are_undone_can_be_narrowed() -> None:
    record = with_effects(effect("reserve", EffectState.UNKNOWN))
    assert next_compensation(plan(), record, item=None) is not None
    assert next_compensation(plan(), record, item=None, states=(EffectState.UNDO_PENDING,)) is None


def batch() -> Plan:
    each = ForEach(
        "each", items=lambda ctx: [], steps=(ActionStep("charge", noop, compensate=noop),)
    )
    flow = Flow(name="batch", steps=(ActionStep("prepare", noop), each))
    return Plan(definition=flow, queues=QUEUES, now=NOW, kinds=REGISTRY)


def test_an_items_effects_are_undone_by_its_item_step_and_may_be_picked_by_item() -> None:
    record = started().model_copy(
        update={"effects": [effect("each[0].charge", at_s=1), effect("each[1].charge", at_s=2)]}
    )
    newest = next_compensation(batch(), record, item=None)
    assert newest is not None and newest.step == "each[1].charge"
    first = next_compensation(batch(), record, item=0)
    assert first is not None and first.step == "each[0].charge"
    position = undo_position(batch(), record, first, attempt=2)
    assert (position.step, position.step_index, position.kind) == ("charge", 0, TaskKind.COMPENSATE)
    assert (position.scope, position.item, position.attempt) == ("each", 0, 2)


def test_a_step_the_definition_no_longer_has_has_no_index() -> None:
    assert index_in(plan(), None, "finish") == 2
    with pytest.raises(UnknownFlow, match="flow 'demo' has no step 'renamed' any more"):
        index_in(plan(), None, "renamed")


def test_a_flow_adopts_its_items_effects_it_does_not_have_yet() -> None:
    record = with_effects(effect("reserve"), effect("each[0].charge"))
    merged = adopted(record, [effect("each[0].charge", at_s=9), effect("each[1].charge")])
    assert [(e.step, e.at) for e in merged.effects] == [
        ("reserve", NOW),
        ("each[0].charge", NOW),  # kept: it has it already
        ("each[1].charge", NOW),
    ]
