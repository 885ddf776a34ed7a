"""``relayflow watch``'s lines: each history entry once, polls in flight marked not yet written
and not shown again when their chain's checkpoint writes them."""

from __future__ import annotations

from typing import Any

from relayflow.cli.follow import NOT_WRITTEN, Follower


def poll(n: int, *, outcome: str = "not ready: PENDING") -> dict[str, Any]:
    return {
        "at": f"2030-01-01T00:00:{n:02d}+00:00",
        "generation": 0,
        "step": "await_registration",
        "kind": "poll",
        "attempt": 0,
        "poll": n,
        "outcome": outcome,
        "delay_s": 1.0,
    }


def doc(*entries: dict[str, Any], dropped: int = 0) -> dict[str, Any]:
    return {"history": list(entries), "history_dropped": dropped}


def test_polls_in_flight_are_marked_and_not_shown_again_once_written() -> None:
    follower = Follower()
    # Given the document written at poll 0
    assert len(follower.document(doc(poll(0)))) == 1
    # When the chain's task carries polls 1 and 2, read twice
    shown = follower.polls_in_flight([poll(1), poll(2)])
    again = follower.polls_in_flight([poll(1), poll(2)])
    # Then each is shown once, marked not yet written
    assert [line.endswith(NOT_WRITTEN) for line in shown] == [True, True]
    assert "poll 1" in shown[0] and "poll 2" in shown[1]
    assert again == []
    # And the checkpoint that writes them (and poll 3, a truncated note's text aside) shows
    # only what was not shown
    written = follower.document(doc(poll(0), poll(1, outcome="not ready"), poll(2), poll(3)))
    assert len(written) == 1 and "poll 3" in written[0] and NOT_WRITTEN not in written[0]


def test_a_read_against_an_older_document_does_not_show_written_polls_as_in_flight() -> None:
    follower = Follower()
    follower.document(doc(poll(0), poll(1)))
    assert follower.polls_in_flight([poll(1)]) == []
    assert len(follower.polls_in_flight([poll(2)])) == 1


def test_entries_dropped_from_a_trimmed_history_are_counted_not_shown_twice() -> None:
    follower = Follower()
    follower.document(doc(poll(0), poll(1)))
    # the document now keeps its last two entries of three
    lines = follower.document(doc(poll(1), poll(2), dropped=1))
    assert len(lines) == 1 and "poll 2" in lines[0]
