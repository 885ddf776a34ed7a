"""relayflow graph: a flow's shape as text and Mermaid, every kind of step named; status lines
for the branches of a running flow."""

from __future__ import annotations

import json

from relayflow import ActionStep, Flow, ForEach, IfStep, PollStep
from relayflow.cli import render, shapes
from relayflow.cli.commands import main
from relayflow.testing import Harness, scripted


def shaped() -> Flow:
    return Flow(
        name="shaped",
        steps=(
            ForEach("each", items=lambda ctx: [1, 2, 3], steps=(ActionStep("go", scripted({})),)),
            IfStep("big", lambda ctx: True, then=("a",), otherwise=("b",)),
            ActionStep("a", scripted({})),
            PollStep("b", scripted({}), after=("big",)),
            ActionStep("end", scripted({}), after=("a", "b")),
        ),
    )


def test_text_names_every_step_its_kind_and_what_it_runs_after() -> None:
    text = shapes.render(shaped(), mermaid=False).splitlines()
    assert text[0] == "shaped v1"
    assert (
        "for each item, 10 at a time" in text[1] and text[2].strip() == "go  <- (start)   [action]"
    )
    assert "[if: then a; otherwise b]" in text[3]
    assert text[5].split() == ["b", "<-", "big|otherwise|", "[poll]"]
    assert "end" in text[6] and "<- a, b" in text[6]


def test_mermaid_draws_the_foreach_items_as_a_subgraph() -> None:
    mermaid = shapes.render(shaped(), mermaid=True)
    assert mermaid.startswith("flowchart TD")
    assert "subgraph each_items [each: each item]" in mermaid
    assert "each -.-> each_items" in mermaid


def test_status_lines_show_each_running_branch_and_the_foreach_progress() -> None:
    h = Harness(shaped())
    flow_id = h.start("shaped")
    h.deliver_next()  # the fan-out
    lines = render.running(h.flow(flow_id).model_dump(mode="json"))
    assert lines[0].startswith("  running   each fanout")
    assert "3 items in 3 lanes: 0 lanes done, 0 items failed" in lines[1]


def test_the_cli_prints_the_graph_of_an_app_flow(capsys: object) -> None:
    assert main(["graph", "fleet"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "register_all" in out and "callback, timeout" in out


def test_an_unknown_flow_is_refused_with_status_2(capsys: object) -> None:
    assert main(["graph", "nope"]) == 2
    assert "unknown flow 'nope'" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_graph_schema_prints_the_flows_input_and_output_schemas(capsys: object) -> None:
    assert main(["graph", "registration", "--schema"]) == 0
    shown = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    assert (shown["flow"], shown["newest"]) == ("registration", True)
    assert shown["input_schema"]["title"] == "RegistrationInput"
    assert "resource" in shown["input_schema"]["required"]
    assert shown["output_schema"] is None  # the reference flow declares no output model
