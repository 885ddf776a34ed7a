"""The CLI never lets a flow's data drive the terminal (issue 18): every control character a
value holds is printed as an escape, in the render functions, in ``--json`` output and in
whatever a command prints."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest

from relayflow.cli import commands, operate, render
from relayflow.cli.api import ApiError

# What a hostile input, output or error message may carry.
TITLE = "\x1b]0;pwned\x07"  # OSC 0: set the window title
CLEAR = "\x1b[2J"  # CSI 2 J: erase the screen
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"  # OSC 52: write the clipboard
C1_CSI = "\x9b2J"  # the one-byte C1 CSI, the same erase
FORGED = "ok\r\n  status    SUCCEEDED"  # a line of its own that is not
HOSTILE = TITLE + CLEAR + CLIPBOARD + C1_CSI + FORGED + "\x7f\u202e"
# What may reach the terminal from any output: newlines of the layout, nothing else below
# space, no DEL, no C1, no bidi override.
ACTIVE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def assert_inert(shown: str) -> None:
    found = ACTIVE.findall(shown)
    assert not found, f"control characters printed as themselves: {found!r}"
    assert "\\x1b]0;pwned\\x07" in shown or "\\u001b]0;pwned\\u0007" in shown, "still visible"


def hostile_flow() -> dict[str, Any]:
    return {
        "flow_id": "f-1",
        "flow": "registration",
        "version": 1,
        "status": "FAILED",
        "tenant": HOSTILE,
        "priority": "low",
        "created_at": "2026-03-01T12:00:00+00:00",
        "input": {"resource": HOSTILE, HOSTILE: 1},
        "outputs": {"register": {"id": HOSTILE}},
        "position": {"step": "register", "kind": "action", "generation": 0},
        "tracks": {"main": {"position": {"step": HOSTILE, "kind": "poll", "poll": 2}}},
        "skipped": [HOSTILE],
        "result": {"code": "BUSINESS_REJECTED", "message": HOSTILE, "error": {"why": HOSTILE}},
        "history": [
            {
                "at": "2026-03-01T12:00:01+00:00",
                "step": HOSTILE,
                "kind": "action",
                "attempt": 0,
                "outcome": "failed: " + HOSTILE,
                "detail": HOSTILE,
                "by": HOSTILE,
            }
        ],
        "history_dropped": 0,
    }


# --- The escaping itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (TITLE, "\\x1b]0;pwned\\x07"),
        (CLEAR, "\\x1b[2J"),
        (C1_CSI, "\\x9b2J"),
        ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
        ("\x00\x7f\x85", "\\x00\\x7f\\x85"),
        ("abc\u202edcba", "abc\\u202edcba"),
        ("Grüße, 世界 ✓", "Grüße, 世界 ✓"),
    ],
    ids=["osc-title", "csi-clear", "c1-csi", "newline-tab-cr", "nul-del-nel", "bidi", "unicode"],
)
def test_text_shows_control_characters_as_escapes_and_leaves_the_rest(
    value: str, shown: str
) -> None:
    assert render.text(value) == shown


def test_clean_escapes_every_string_of_a_document_keys_included() -> None:
    cleaned = render.clean({CLEAR: [TITLE, {"n": 1, "x": None}], "ok": True})
    assert cleaned == {"\\x1b[2J": ["\\x1b]0;pwned\\x07", {"n": 1, "x": None}], "ok": True}


def test_json_output_is_valid_round_trips_and_carries_no_control_character() -> None:
    # given a document whose strings hold C0, DEL, C1 and a bidi override
    doc = hostile_flow()
    # when it is printed as JSON
    shown = render.as_json(doc)
    # then nothing in it acts on a terminal (C1's \u009b included, which
    # json.dumps(ensure_ascii=False) would pass through), and it parses back to the same data
    assert_inert(shown)
    assert "\\u009b2J" in shown and "\\u007f" in shown and "\\u202e" in shown
    assert json.loads(shown) == doc
    assert "世界" in render.as_json({"name": "世界"})  # readable, not \\u4e16\\u754c


# --- The render functions -----------------------------------------------------------------------


def test_a_flow_with_hostile_data_is_shown_escaped() -> None:
    shown = render.flow(hostile_flow())
    assert_inert(shown)
    # the layout's lines are the layout's: the forged one stays inside its field
    assert not any(line.startswith("  status    SUCCEEDED") for line in shown.splitlines())
    assert "  status    FAILED" in shown
    assert f"  result    BUSINESS_REJECTED: {render.text(HOSTILE)}" in shown


def test_history_entries_and_running_branches_are_shown_escaped() -> None:
    doc = hostile_flow()
    assert_inert(render.entry(doc["history"][0]))
    assert_inert("\n".join(render.running(doc)))
    assert "\\x9b" in render.position_label({"step": C1_CSI + TITLE, "kind": "action"})


def test_tables_show_their_rows_escaped() -> None:
    flows = [
        {"flow_id": "f-1", "flow": HOSTILE, "status": "FAILED", "position": HOSTILE,
         "updated_at": "2026-03-01T12:00:00+00:00", "code": HOSTILE},
    ]  # fmt: skip
    assert_inert(render.flow_table(flows))
    tenants = [{"tenant": "acme", "paused": True, "paused_by": HOSTILE, "reason": HOSTILE}]
    assert_inert(render.tenant_table(tenants))
    breakers = [
        {"dependency": HOSTILE, "state": "open", "transitions": [
            {"at": "2026-03-01T12:00:00+00:00", "to": "open", "why": HOSTILE}]},
    ]  # fmt: skip
    assert_inert(render.breaker_table(breakers))


def test_rejected_messages_and_dead_letters_show_their_data_escaped() -> None:
    rejected = [
        {"rejected_at": "2026-03-01T12:00:00+00:00", "id": HOSTILE, "kind": "invalid",
         "reason": HOSTILE, "data": HOSTILE},
    ]  # fmt: skip
    assert_inert(render.rejected_table(rejected))
    letters = [{"message_id": HOSTILE, "delivery_count": 5, "data": HOSTILE}]
    assert_inert(render.dead_letter_table(letters))


# --- Through the commands -----------------------------------------------------------------------


class FakeApi:
    """Answers every GET with one document and every POST with another."""

    def __init__(self, got: dict[str, Any], posted: dict[str, Any] | None = None) -> None:
        self.got, self.posted = got, posted or {}

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        return self.got

    def post(self, path: str, body: Any) -> dict[str, Any]:
        return self.posted


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(got: dict[str, Any], posted: dict[str, Any] | None = None) -> None:
        monkeypatch.setattr(operate, "api", lambda: FakeApi(got, posted))

    return install


def test_status_prints_a_hostile_flow_escaped(api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api(hostile_flow())
    assert commands.main(["status", "f-1"]) == 0
    assert_inert(capsys.readouterr().out)


def test_status_json_is_valid_json_of_the_flow_with_nothing_active(
    api: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    api(hostile_flow())
    assert commands.main(["status", "f-1", "--json"]) == 0
    out = capsys.readouterr().out
    assert_inert(out)
    assert json.loads(out) == hostile_flow()


@pytest.mark.parametrize(
    ("argv", "got"),
    [
        (["list"], {"flows": [{"flow_id": "f", "flow": HOSTILE, "status": "RUNNING",
                               "position": HOSTILE}], "next_cursor": HOSTILE}),
        (["list", "--json"], {"flows": [{"flow": HOSTILE}], "next_cursor": HOSTILE}),
        (["rejected", "list"], {"rejected": [{"id": "m", "kind": "invalid", "reason": HOSTILE,
                                              "data": HOSTILE}], "next_cursor": HOSTILE}),
        (["dead-letters", "list"], {"dead_letters": [{"message_id": "m", "data": HOSTILE}]}),
        (["breakers"], {"breakers": [{"dependency": HOSTILE, "state": "closed"}]}),
        (["tenants", "list"], {"tenants": [{"tenant": "t", "paused": True, "paused_by": HOSTILE,
                                            "reason": HOSTILE}]}),
    ],
    ids=["list", "list-json", "rejected", "dead-letters", "breakers", "tenants"],
)  # fmt: skip
def test_every_listing_command_prints_hostile_data_escaped(
    api: Any, argv: list[str], got: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    api(got)
    assert commands.main(argv) == 0
    assert_inert(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("argv", "posted"),
    [
        (["cancel", "f-1", "--reason", "dup"], {"flow_id": "f-1", "status": HOSTILE}),
        (["tenants", "pause", "acme", "--reason", "drill"],
         {"tenant": HOSTILE, "paused": True, "by": HOSTILE}),
        (["dead-letters", "replay", "m-1", "--reason", "fixed"],
         {"replayed": HOSTILE, "message_id": HOSTILE}),
    ],
    ids=["cancel", "pause", "replay"],
)  # fmt: skip
def test_what_an_action_answers_is_printed_escaped(
    api: Any, argv: list[str], posted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    api({}, posted)
    assert commands.main(argv) == 0
    assert_inert(capsys.readouterr().out)


def test_an_api_refusal_quoting_data_is_printed_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse() -> Any:
        raise ApiError(400, "INVALID_ARGUMENT", f"no flow {HOSTILE!s}")

    monkeypatch.setattr(operate, "api", refuse)
    assert commands.main(["status", "f-1"]) == 1
    assert_inert(capsys.readouterr().err)


def test_a_command_that_prints_raw_data_is_still_guarded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a command that forgets to escape what it prints, on stdout and stderr
    def careless(args: Any) -> int:
        print("shown " + TITLE + C1_CSI + "\x7f")
        print("err " + TITLE, file=sys.stderr)
        return 0

    monkeypatch.setitem(commands.COMMANDS, "breakers", careless)
    # when it runs through main
    assert commands.main(["breakers"]) == 0
    # then the escape sequences were escaped on the way out, and the streams are restored
    captured = capsys.readouterr()
    assert_inert(captured.out)
    assert_inert(captured.err)
    assert captured.out == "shown \\x1b]0;pwned\\x07\\x9b2J\\x7f\n"
    assert not isinstance(sys.stdout, render._Guard)


def test_the_guard_keeps_the_layouts_newlines_tabs_and_carriage_returns() -> None:
    import io

    inner = io.StringIO()
    guard = render._Guard(inner)  # type: ignore[arg-type]
    guard.write("a\tb\r  [###...] 3/6\n" + CLEAR)
    assert inner.getvalue() == "a\tb\r  [###...] 3/6\n\\x1b[2J"
