"""The dry run's row: what a preview says, as the api, the CLI and the console show it."""

from __future__ import annotations

from relayflow.core.planner.previews import Preview


def test_a_preview_shows_its_steps_and_effects_in_order() -> None:
    preview = Preview(
        key="acme~f-1",
        action="reset",
        allowed=True,
        rerun=("register", "await", "create"),
        undone=("create", "register"),
        kept=("reserve",),
    )
    assert preview.as_json() == {
        "key": "acme~f-1",
        "action": "reset",
        "allowed": True,
        "reason": "",
        "rerun": ["register", "await", "create"],
        "undone": ["create", "register"],
        "kept": ["reserve"],
    }


def test_a_refused_preview_says_why_and_carries_the_action_s_own_facts() -> None:
    preview = Preview(
        key="f-2", action="retry", allowed=False, reason="it is RUNNING", detail={"at": "x"}
    )
    shown = preview.as_json()
    assert (shown["allowed"], shown["reason"], shown["detail"]) == (
        False,
        "it is RUNNING",
        {"at": "x"},
    )
