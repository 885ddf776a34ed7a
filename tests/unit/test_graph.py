"""relayflow.core.graph: a flow's shape, checked when it is defined (unknown steps, cycles,
unreachable branch members refused), which steps are ready given what is done, skipped and
running, and the graph drawn as text and Mermaid."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from relayflow import ActionStep, ConfigError, Flow, StepContext
from relayflow.core.flows import IfStep
from relayflow.core.graph import Graph
from relayflow.core.state import Status
from relayflow.testing import Harness, scripted
from tests.unit.test_shapes import choice


def test_a_step_after_an_unknown_step_is_refused() -> None:
    with pytest.raises(ConfigError, match="runs after unknown \\['nope'\\]"):
        Flow(name="f", steps=(ActionStep("a", scripted({}), after=("nope",)),))


def test_a_cycle_is_refused_and_named() -> None:
    with pytest.raises(ConfigError, match=r"cycle: (a -> b -> a|b -> a -> b)"):
        Flow(
            name="f",
            steps=(
                ActionStep("a", scripted({}), after=("b",)),
                ActionStep("b", scripted({}), after=("a",)),
            ),
        )


def test_a_step_in_two_branches_is_refused_as_unreachable() -> None:
    with pytest.raises(ConfigError, match=r"in both branches of 'c'"):
        Flow(
            name="f",
            steps=(
                IfStep("c", lambda ctx: True, then=("x",), otherwise=("x",)),
                ActionStep("x", scripted({})),
            ),
        )


def test_the_graph_draws_as_text_and_mermaid() -> None:
    graph = choice(1).graph
    assert re.search(r"^settle +<- approve, auto_approve$", graph.text(), re.M)
    mermaid = graph.mermaid()
    assert mermaid.startswith("flowchart TD")
    assert "big{big?}" in mermaid and "big -->|then| manual_review" in mermaid
    assert "big -->|otherwise| auto_approve" in mermaid


def test_a_straight_line_flow_is_unchanged() -> None:
    flow = Flow(name="f", steps=(ActionStep("a", scripted({})), ActionStep("b", scripted({}))))
    assert flow.graph.deps == {"a": (), "b": ("a",)}
    h = Harness(flow)
    record = h.run(h.start("f"))
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.finished_at is not None and record.finished_at - record.created_at == timedelta(0)


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def diamond() -> Graph:
    """a -> (b || c) -> d."""
    return Flow(
        name="f",
        steps=(
            ActionStep("a", noop),
            ActionStep("b", noop),
            ActionStep("c", noop, after=("a",)),
            ActionStep("d", noop, after=("b", "c")),
        ),
    ).graph


def test_ready_steps_are_those_whose_dependencies_are_over_in_definition_order() -> None:
    graph = diamond()
    assert graph.ready(done=[], skipped=[], busy=[]) == ["a"]
    assert graph.ready(done=["a"], skipped=[], busy=[]) == ["b", "c"]
    assert graph.ready(done=["a"], skipped=[], busy=["b"]) == ["c"]  # running: not again
    assert graph.ready(done=["a", "b"], skipped=["c"], busy=[]) == ["d"]  # skipped counts
    assert graph.ready(done=["a", "b", "c", "d"], skipped=[], busy=[]) == []


def test_the_sinks_are_the_steps_nothing_runs_after() -> None:
    assert diamond().sinks() == ["d"]
    assert choice(1).graph.sinks() == ["settle"]


def test_a_branch_member_runs_after_its_choice_and_the_branch_not_taken_is_skipped() -> None:
    graph = choice(1).graph
    assert graph.deps["approve"] == ("manual_review", "big")  # as declared, and its choice
    assert graph.skipped_by("big", took_then=True) == ["auto_approve"]
    assert graph.skipped_by("big", took_then=False) == ["manual_review", "approve"]


@pytest.mark.parametrize(
    ("then", "mentions"),
    [(("nope",), "names unknown 'nope'"), (("c",), "names unknown 'c'")],
    ids=["unknown", "itself"],
)
def test_a_choice_naming_an_unknown_step_or_itself_is_refused(
    then: tuple[str, ...], mentions: str
) -> None:
    with pytest.raises(ConfigError, match=mentions):
        Flow(
            name="f",
            steps=(IfStep("c", lambda ctx: True, then=then, otherwise=()), ActionStep("x", noop)),
        )


def test_a_step_in_branches_of_two_choices_is_refused() -> None:
    with pytest.raises(ConfigError, match="in a branch of both 'c1' and 'c2'"):
        Flow(
            name="f",
            steps=(
                IfStep("c1", lambda ctx: True, then=("x",), otherwise=()),
                IfStep("c2", lambda ctx: True, then=("x",), otherwise=()),
                ActionStep("x", noop),
            ),
        )
