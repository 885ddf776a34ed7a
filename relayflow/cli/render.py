"""How the CLI prints flows, history entries, lists and messages.

Everything here takes the JSON the api returns (times as ISO 8601 strings), so printing
needs neither pydantic nor a Google client; ``watch`` passes its Firestore documents through
the same JSON form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

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
    items, a callback awaited, and the steps an If skipped."""
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
    if doc.get("skipped"):
        lines.append(f"  skipped   {', '.join(doc['skipped'])}")
    return lines


def position_label(position: Mapping[str, Any]) -> str:
    """As ``Position.label()``: ``await_registration poll 3``, ``register action attempt 0``."""
    step = position["step"]
    if position.get("scope"):  # a ForEach item's step
        step = f"{position['scope']}[{position.get('item')}].{step}"
    if position.get("kind") == "poll":
        return f"{step} poll {position.get('poll', 0)}"
    return f"{step} {position['kind']} attempt {position.get('attempt', 0)}"


def entry(e: Mapping[str, Any]) -> str:
    """One history line: time, step, try, what was seen, the delay chosen, who."""
    kind = e.get("kind", "")
    which = f"poll {e.get('poll', 0)}" if kind == "poll" else f"{kind} #{e.get('attempt', 0)}"
    outcome, detail = str(e.get("outcome", "")), str(e.get("detail") or "")
    delay = e.get("delay_s")
    line = f"  {clock(e.get('at'))}  {e.get('step', ''):<20} {which:<12} {outcome}"
    line += f" ({detail})" if detail and detail not in outcome else ""
    line += f"  next in {delay:.2f}s" if delay is not None else ""
    return line + (f"  by {e['by']}" if e.get("by") else "")


def flow(doc: Mapping[str, Any], *, history: int = 20) -> str:
    """A flow: status, position, counts, next run, result, the last ``history`` entries."""
    position = doc["position"]
    lines = [
        f"flow {doc['flow_id']} ({doc['flow']} v{doc.get('version', 1)}, "
        f"generation {position.get('generation', 0)})",
        f"  status    {doc['status']}",
        f"  position  {position_label(position)}",
        f"  polls     {doc.get('polls', 0)}   attempts {doc.get('attempts', 0)}",
        f"  tenant    {doc.get('tenant', 'default')} ({doc.get('priority', 'low')} priority)",
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
        payload = result.get("data") if result.get("data") is not None else result.get("error")
        lines.append(f"            {json.dumps(payload, default=str)}")
    entries = list(doc.get("history") or [])
    lines.append("history:")
    lines.extend(entry(e) for e in entries[-history:])
    return "\n".join(lines)


def counts(found: Mapping[str, int]) -> str:
    """``PENDING 0  RUNNING 2  …  (total 9)``."""
    shown = "  ".join(f"{status} {found.get(status, 0)}" for status in STATUSES)
    return f"{shown}  (total {sum(found.values())})"


def flow_table(flows: Sequence[Mapping[str, Any]]) -> str:
    """Summaries, one a line."""
    lines = [
        f"{'FLOW ID':<40} {'FLOW':<18} {'STATUS':<13} {'POSITION':<32} {'POLLS':>5}  "
        f"{'UPDATED':<19}  CODE"
    ]
    for f in flows:
        name = f"{f['flow']} v{f.get('version', 1)}"
        lines.append(
            f"{f['flow_id']:<40} {name:<18} {f['status']:<13} {f['position']:<32} "
            f"{f.get('polls', 0):>5}  {stamp(f.get('updated_at')):<19}  {f.get('code') or ''}"
        )
    if not flows:
        lines.append("(no flows)")
    return "\n".join(lines)


def tenant_table(tenants: Sequence[Mapping[str, Any]]) -> str:
    """Tenants, one a line: limits (0: none), priority, state, flows running and waiting."""
    lines = [
        f"{'TENANT':<24} {'PRIORITY':<8} {'MAX RUNNING':>11} {'STARTS/S':>8} "
        f"{'RUNNING':>7} {'WAITING':>7}  STATE"
    ]
    for t in tenants:
        limit = t.get("max_running") or "-"
        rate = t.get("starts_per_s") or "-"
        state = "paused" if t.get("paused") else "active"
        if t.get("paused") and t.get("paused_by"):
            state += f" by {t['paused_by']}: {t.get('reason', '')}"
        lines.append(
            f"{t['tenant']:<24} {t.get('priority', 'low'):<8} {limit!s:>11} {rate!s:>8} "
            f"{t.get('running', 0):>7} {t.get('waiting', 0):>7}  {state}"
        )
    return "\n".join(lines)


def breaker_table(breakers: Sequence[Mapping[str, Any]]) -> str:
    """Breakers, one a line (state, calls and failures over the window, retries against their
    budget, p95), each followed by its last transitions."""
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


def rejected_table(messages: Sequence[Mapping[str, Any]]) -> str:
    lines = [f"{'REJECTED':<19}  {'ID':<36} {'KIND':<8} REASON"]
    for m in messages:
        lines.append(
            f"{stamp(m.get('rejected_at')):<19}  {m['id']:<36} {m['kind']:<8} {m['reason']}"
        )
        if m.get("data"):
            lines.append(f"{'':<21}data: {_preview(m['data'])}")
    if not messages:
        lines.append("(nothing was rejected)")
    return "\n".join(lines)


def dead_letter_table(letters: Sequence[Mapping[str, Any]]) -> str:
    lines = [f"{'MESSAGE ID':<24} {'PUBLISHED':<19}  {'TRIES':>5}  DATA"]
    for d in letters:
        tries = d.get("delivery_count")
        lines.append(
            f"{d['message_id']:<24} {stamp(d.get('published_at')):<19}  "
            f"{'' if tries is None else tries:>5}  {_preview(d.get('data', ''))}"
        )
    if not letters:
        lines.append("(no dead letters are held)")
    return "\n".join(lines)


def _preview(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
