"""How the CLI prints flows, history entries, lists and messages.

Everything here takes the JSON the api returns (times as ISO 8601 strings), so printing
needs neither pydantic nor a Google client; ``watch`` passes its Firestore documents through
the same JSON form.

What is printed comes from data anyone who can start a flow or publish a message controls (an
input, an error message, a rejected message's bytes), so no control character of it reaches
the terminal as itself: ESC and the C1 controls start escape sequences that set the window
title, rewrite the screen or write the clipboard (OSC 52), and a newline or carriage return
would forge lines. Every function here escapes its data (:func:`text`, :func:`clean`,
:func:`as_json`); :func:`guarded` is the last line of defence around a whole command.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO, cast

STATUSES = (
    "PENDING",
    "RUNNING",
    "COMPENSATING",
    "SUCCEEDED",
    "FAILED",
    "TIMED_OUT",
    "CANCELLED",
)  # relayflow.core.state.Status, in its order (a unit test keeps them equal)
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED"})

# C0 (newline and tab included: in a value they are data, not layout), DEL, C1; lone
# surrogates (unprintable, and an encoding error on a UTF-8 terminal); the bidirectional
# embeddings, overrides and isolates that make text display in another order than it reads
# (CVE-2021-42574).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# What a whole command's output may still carry: its own layout (newline, tab, and the
# carriage return the demo's progress bar redraws with).
_UNSAFE_IN_LAYOUT = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
# Inside JSON strings: what json.dumps(ensure_ascii=False) leaves as it is (it escapes C0).
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def text(value: object) -> str:
    """``value`` as one line of text, every control character in it shown as an escape
    (``\\x1b``, ``\\x9b``, ``\\n``) instead of acting on the terminal."""
    return _UNSAFE.sub(_escaped, str(value))


def clean(value: Any) -> Any:
    """A JSON value with every string in it (keys too) passed through :func:`text`."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, Mapping):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def as_json(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON that is safe on a terminal and still valid, readable JSON: non-ASCII
    text as itself, every control character escaped (``\\u001b``, ``\\u009b``)."""
    dumped = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)


class _Guard(io.TextIOBase):
    """A text stream that escapes the control characters a layout never needs."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(_UNSAFE_IN_LAYOUT.sub(_escaped, s))
        return len(s)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._inner.encoding


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """While it lasts, nothing written to stdout or stderr reaches the terminal with an
    escape sequence in it, whatever forgot to escape its data."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = cast(TextIO, _Guard(out)), cast(TextIO, _Guard(err))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def clock(value: str | None) -> str:
    """``16:46:59.447`` from an ISO time."""
    if not value:
        return ""
    return datetime.fromisoformat(value).strftime("%H:%M:%S.%f")[:-3]


def stamp(value: str | None) -> str:
    """``2026-03-01 16:46:59`` from an ISO time."""
    if not value:
        return ""
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def running(doc: Mapping[str, Any]) -> list[str]:
    """A line for each branch running now (its position, next task), a ForEach's lanes and
    items, a callback awaited, a sleep's wake time, and the steps an If skipped."""
    doc = clean(doc)
    lines = []
    for key, track in sorted((doc.get("tracks") or {}).items()):
        what = "undoing" if key == "~undo" else "running"
        nxt = track.get("next")
        due = f", next {nxt['run_at']} ({nxt['queue']})" if nxt else ""
        lines.append(f"  {what:<9} {position_label(track['position'])}{due}")
        fan = track.get("fanout")
        if fan:
            lines.append(
                f"            {fan['total']} items in {fan['lanes']} lanes: "
                f"{len(fan['ended'])} lanes done, {len(fan['failed'])} items failed"
            )
        if track.get("token"):
            lines.append("            waiting for its callback token to be completed")
        if track.get("wake_at"):
            lines.append(f"            sleeping until {track['wake_at']}")
        if track.get("waiting_for"):
            until = f" until {track['signal_until']}" if track.get("signal_until") else ""
            names = " or ".join(str(n) for n in track["waiting_for"])
            lines.append(f"            waiting for signal {names}{until}")
    if doc.get("skipped"):
        lines.append(f"  skipped   {', '.join(doc['skipped'])}")
    return lines


def position_label(position: Mapping[str, Any]) -> str:
    """As ``Position.label()``: ``await_registration poll 3``, ``register action attempt 0``."""
    position = clean(position)
    step = position["step"]
    if position.get("scope"):  # a ForEach item's step
        step = f"{position['scope']}[{position.get('item')}].{step}"
    if position.get("kind") == "poll":
        return f"{step} poll {position.get('poll', 0)}"
    if position.get("kind") == "sleep":
        return f"{step} sleep hop {position.get('poll', 0)}"
    if position.get("kind") == "signal":
        return f"{step} signal wait {position.get('poll', 0)}"
    return f"{step} {position['kind']} attempt {position.get('attempt', 0)}"


def entry(e: Mapping[str, Any]) -> str:
    """One history line: time, step, try, what was seen, the delay chosen, who."""
    e = clean(e)
    kind = e.get("kind", "")
    if kind in ("poll", "sleep"):
        which = f"{'poll' if kind == 'poll' else 'hop'} {e.get('poll', 0)}"
    else:
        which = f"{kind} #{e.get('attempt', 0)}"
    outcome, detail = str(e.get("outcome", "")), str(e.get("detail") or "")
    delay = e.get("delay_s")
    line = f"  {clock(e.get('at'))}  {e.get('step', ''):<20} {which:<12} {outcome}"
    line += f" ({detail})" if detail and detail not in outcome else ""
    line += f"  next in {delay:.2f}s" if delay is not None else ""
    return line + (f"  by {e['by']}" if e.get("by") else "")


def flow(doc: Mapping[str, Any], *, history: int = 20) -> str:
    """A flow: status, position, counts, next run, result, the last ``history`` entries."""
    raw_result = doc.get("result") or {}
    doc = clean(doc)
    position = doc["position"]
    lines = [
        f"flow {doc['flow_id']} ({doc['flow']} v{doc.get('version', 1)}, "
        f"generation {position.get('generation', 0)})",
        f"  status    {doc['status']}",
        f"  position  {position_label(position)}",
        f"  polls     {doc.get('polls', 0)}   attempts {doc.get('attempts', 0)}",
        f"  tenant    {doc.get('tenant', 'default')} ({doc.get('priority', 'low')} priority)",
        *labelled(doc),
        f"  created   {doc.get('created_at')}",
    ]
    if doc.get("admission") == "waiting" and doc["status"] not in TERMINAL:
        lines.append(
            f"  waiting   for its tenant's quota (queued {doc.get('queued_at')}): it starts "
            "when one of the tenant's running flows ends"
        )
    lines += running(doc)
    result = doc.get("result")
    if result:
        lines.append(f"  result    {result['code']}: {result['message']}")
        payload = raw_result.get("data")
        payload = raw_result.get("error") if payload is None else payload
        lines.append(f"            {as_json(payload, indent=None)}")
    lines += cleanup(doc.get("cleanup"))
    lines += family(doc)
    entries = list(doc.get("history") or [])
    lines.append("history:")
    lines.extend(entry(e) for e in entries[-history:])
    return "\n".join(lines)


def labelled(doc: Mapping[str, Any]) -> list[str]:
    """A flow's labels and the dependency that holds it up or failed it, if it has them."""
    lines = []
    if doc.get("labels"):
        lines.append(f"  labels    {labels(doc['labels'])}")
    if doc.get("dependency"):
        lines.append(f"  dependency {text(doc['dependency'])} (relayflow list --dependency)")
    return lines


def labels(found: Mapping[str, Any]) -> str:
    """``order_id=123 region=eu``, in key order."""
    return " ".join(f"{text(k)}={text(v)}" for k, v in sorted(found.items()))


def family(doc: Mapping[str, Any]) -> list[str]:
    """A child flow's parent, the children a flow waits for, and how to list its children
    (``GET /flows/{id}``'s ``family``: ``relayflow.web.family``)."""
    found = doc.get("family") or {}
    lines = []
    parent = found.get("parent")
    if parent:
        item = "" if parent.get("item") is None else f" item {parent['item']}"
        lines.append(f"  parent    {text(parent['flow_id'])} (step {text(parent['step'])}{item})")
    waiting = (found.get("children") or {}).get("waiting_for") or []
    lines += [f"  child     {text(child)} (waited for)" for child in waiting]
    if waiting or any(e.get("child") for e in doc.get("effects") or []):
        lines.append(f"  children  relayflow list --parent {text(doc.get('flow_id', ''))}")
    return lines


def cleanup(found: Mapping[str, Any] | None) -> list[str]:
    """The clean-up of an ended flow (the undo that goes on after its end), if it has one."""
    if not found:
        return []
    found = clean(found)
    state = found.get("state")
    if state == "pending":
        until, tries = found.get("until"), found.get("tries", 0)
        return [f"  cleanup   pending: undoing what it left until {until} ({tries} failed tries)"]
    if state == "done":
        return [f"  cleanup   done at {found.get('finished_at')}: everything it left was undone"]
    left = ", ".join(str(e) for e in found.get("left") or [])
    why = found.get("reason") or ""
    return [
        f"  cleanup   abandoned at {found.get('finished_at')}: left {left} (may be live)",
        *([f"            {why}"] if why else []),
        "            relayflow undo ID --reason … undoes them again",
    ]


def counts(found: Mapping[str, int]) -> str:
    """``PENDING 0  RUNNING 2  …  (total 9)``."""
    found = clean(found)
    shown = "  ".join(f"{status} {found.get(status, 0)}" for status in STATUSES)
    return f"{shown}  (total {sum(found.values())})"


def flow_table(flows: Sequence[Mapping[str, Any]]) -> str:
    """Summaries, one a line."""
    flows = clean(flows)
    lines = [
        f"{'FLOW ID':<40} {'FLOW':<18} {'STATUS':<13} {'POSITION':<32} {'POLLS':>5}  "
        f"{'UPDATED':<19}  {'CODE':<20}  LABELS"
    ]
    for f in flows:
        name = f"{f['flow']} v{f.get('version', 1)}"
        lines.append(
            f"{f['flow_id']:<40} {name:<18} {f['status']:<13} {f['position']:<32} "
            f"{f.get('polls', 0):>5}  {stamp(f.get('updated_at')):<19}  "
            f"{f.get('code') or '':<20}  {labels(f.get('labels') or {})}".rstrip()
        )
    if not flows:
        lines.append("(no flows)")
    return "\n".join(lines)


def tenant_table(tenants: Sequence[Mapping[str, Any]]) -> str:
    """Tenants, one a line: limits (0: none), priority, state, flows running and waiting."""
    tenants = clean(tenants)
    lines = [
        f"{'TENANT':<24} {'PRIORITY':<8} {'MAX RUNNING':>11} {'STARTS/S':>8} "
        f"{'RUNNING':>7} {'WAITING':>7}  STATE"
    ]
    for t in tenants:
        limit = t.get("max_running") or "-"
        rate = t.get("starts_per_s") or "-"
        lines.append(
            f"{t['tenant']:<24} {t.get('priority', 'low'):<8} {limit!s:>11} {rate!s:>8} "
            f"{t.get('running', 0):>7} {t.get('waiting', 0):>7}  {_tenant_state(t)}"
        )
    return "\n".join(lines)


def _tenant_state(t: Mapping[str, Any]) -> str:
    """``active``, ``paused (configured)`` or ``paused by WHO: WHY (since WHEN)``."""
    if not t.get("paused"):
        return "active"
    if t.get("configured_paused"):
        return "paused (configured)"
    state = "paused"
    if t.get("paused_by"):
        state += f" by {t['paused_by']}: {t.get('reason', '')}"
        if t.get("since"):
            state += f" (since {stamp(t['since'])})"
    return state


def schedule_table(schedules: Sequence[Mapping[str, Any]]) -> str:
    """Schedules, one block each: cron and zone, policies, state, next ticks (in its zone and
    UTC), then its last runs with their flows' status."""
    blocks = []
    for s in clean(schedules):
        state = "paused" if s.get("paused") else "active"
        if s.get("paused") and s.get("by"):
            state += f" by {s['by']}: {s.get('reason', '')}"
        window = f" {s['catch_up_window_s']:g}s" if s.get("catch_up_window_s") else ""
        lines = [
            f"{s['name']}  {s['flow']}  {s['cron']!r} {s['timezone']}  overlap {s['overlap']}"
            f"  catch-up {s['catch_up']}{window}  {state}"
        ]
        lines += [f"  next  {t['local']}  ({t['utc']})" for t in s.get("next_ticks", ())]
        for run in s.get("runs", ()):
            status = run.get("status") or "-"
            note = f"  {run['note']}" if run.get("note") else ""
            lines.append(f"  run   {run['flow_id']:<48} {run['outcome']:<9} {status:<10}{note}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else "no schedules"


def breaker_table(breakers: Sequence[Mapping[str, Any]]) -> str:
    """Breakers, one a line (state, calls and failures over the window, retries against their
    budget, p95), each followed by its last transitions."""
    breakers = clean(breakers)
    lines = [
        f"{'DEPENDENCY':<20} {'STATE':<10} {'CALLS':>6} {'FAILED':>6} {'RETRIES':>11} "
        f"{'P95':>7}  SINCE"
    ]
    for b in breakers:
        state = b["state"] if b.get("enabled", True) else "off"
        if b["state"] == "open" and b.get("reopen_at"):
            state += f" (probes at {clock(b['reopen_at'])})"
        retries = f"{b.get('retries', 0)}/{b.get('retry_budget', 0):.0f}"
        p95 = "" if b.get("p95_s") is None else f"{b['p95_s']:.3f}s"
        lines.append(
            f"{b['dependency']:<20} {state:<10} {b.get('calls', 0):>6} {b.get('failures', 0):>6} "
            f"{retries:>11} {p95:>7}  {stamp(b.get('since'))}"
        )
        for t in (b.get("transitions") or [])[-3:]:
            lines.append(f"{'':<21}{clock(t['at'])}  → {t['to']}: {t['why']}")
    if not breakers:
        lines.append("(no dependency has been called yet)")
    return "\n".join(lines)


def preview_table(previews: Sequence[Mapping[str, Any]]) -> str:
    """Dry runs, one flow a line: the action, whether it would be done, the steps that would
    run again, the effects that would be undone (newest first) and those kept; or why not."""
    rows: list[tuple[str, ...]] = [
        ("FLOW", "ACTION", "OK", "RUN AGAIN", "UNDONE (NEWEST FIRST)", "KEPT")
    ]
    for p in clean(previews):
        if p.get("allowed"):
            listed = [", ".join(p.get(k) or ()) or "-" for k in ("rerun", "undone", "kept")]
            rows.append((str(p["key"]), str(p["action"]), "yes", *listed))
        else:
            why = f"refused: {p.get('reason', '')}"
            rows.append((str(p["key"]), str(p["action"]), "no", why, "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(f"{c:<{w}}" for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in rows
    )


def rejected_table(messages: Sequence[Mapping[str, Any]]) -> str:
    """Rejected messages, one a line with its reason, then a preview of its data."""
    lines = [f"{'REJECTED':<19}  {'ID':<36} {'KIND':<8} REASON"]
    for raw in messages:
        m = clean(raw)
        lines.append(
            f"{stamp(m.get('rejected_at')):<19}  {m['id']:<36} {m['kind']:<8} {m['reason']}"
        )
        if raw.get("data"):
            lines.append(f"{'':<21}data: {_preview(raw['data'])}")
    if not messages:
        lines.append("(nothing was rejected)")
    return "\n".join(lines)


def dead_letter_table(letters: Sequence[Mapping[str, Any]]) -> str:
    """Held dead letters, one a line: id, when published, deliveries tried, the topic a
    replay sends it to, its data."""
    lines = [f"{'MESSAGE ID':<24} {'PUBLISHED':<19}  {'TRIES':>5}  {'GOES TO':<24} DATA"]
    for raw in letters:
        d = clean(raw)
        tries = d.get("delivery_count")
        lines.append(
            f"{d['message_id']:<24} {stamp(d.get('published_at')):<19}  "
            f"{'' if tries is None else tries:>5}  {d.get('goes_to') or '':<24} "
            f"{_preview(raw.get('data', ''))}"
        )
    if not letters:
        lines.append("(no dead letters are held)")
    return "\n".join(lines)


def _preview(data: object, width: int = 100) -> str:
    """Data on one line of at most ``width`` characters: runs of whitespace (newlines too)
    become one space, and what is left of the control characters is escaped."""
    flat = text(" ".join(str(data).split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"
