"""``relayflow bulk``: act on every flow a filter matches, through the api, after a dry run.

    relayflow bulk retry --status FAILED --flow registration --since 2026-03-01T12:00:00Z \\
        --reason "client API back" --dry-run          # the dry run: counts and first rows
    relayflow bulk run ID [--follow]                  # act on exactly what it listed
    relayflow bulk retry ... --reason WHY --yes [--follow]   # dry run, then run, at once
    relayflow bulk reset --flow orders --code DECLINED --to-step charge [--keep-effects] ...
    relayflow bulk status ID [--follow]               # progress; a live line with --follow
    relayflow bulk previews ID [--page N]             # every flow's row, 100 a page
    relayflow bulk list | pause ID | resume ID | stop ID --reason WHY  (stop: cancel the bulk
                                                                      action itself)

The api runs it server-side, in batches paced by ``--rate`` (flows a second), put off while
a dependency the flows call has its breaker open; the CLI only asks and shows. Standard library
only, as every operator command.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from relayflow.cli import render
from relayflow.cli.api import Api, quoted
from relayflow.cli.operate import api

FOLLOW_POLL_S = 1.0
FOLLOW_TIMEOUT_S = 24 * 3600.0
SHOWN_ROWS = 20
FILTERS = {
    "flow": "flow",
    "status": "status",
    "version": "version",
    "tenant": "tenant",
    "parent": "parent",
    "label": "label",
    "code": "code",
    "dependency": "dependency",
    "updated_from": "since",
    "updated_to": "until",
}
OVER = ("done", "cancelled", "failed")


def cmd_bulk(args: argparse.Namespace) -> int:
    client = api()
    if args.bulk_action in ("retry", "cancel", "reset"):
        return _make(client, args)
    handlers: dict[str, Callable[[Api, argparse.Namespace], int]] = {
        "list": _list,
        "status": _status,
        "previews": _previews,
        "run": _run,
    }
    if args.bulk_action in handlers:
        return handlers[args.bulk_action](client, args)
    verb = "cancel" if args.bulk_action == "stop" else args.bulk_action
    done = client.post(f"/bulk/{quoted(args.bulk_id)}:{verb}", {"reason": args.reason or ""})
    print(progress(done))
    return 0


def _make(client: Api, args: argparse.Namespace) -> int:
    """The dry run; then, with ``--yes`` (or a yes at the prompt), the run."""
    wanted = {key: getattr(args, attr) for key, attr in FILTERS.items() if getattr(args, attr)}
    body: dict[str, Any] = {
        "action": args.bulk_action,
        "filter": wanted,
        "reason": args.reason,
        "rate_per_s": args.rate,
        "dry_run": True,
    }
    if args.bulk_action == "reset":
        body |= {"step": args.to_step, "undo": not args.keep_effects}
    made = client.post("/bulk", body)
    print(summary(made))
    print(preview_table(made.get("previews") or [], limit=SHOWN_ROWS, total=made["matched"]))
    bulk_id = render.text(made["id"])
    if args.dry_run or not made["allowed"]:
        print(f"run it: relayflow bulk run {bulk_id}   (every row: relayflow bulk previews "
              f"{bulk_id})")  # fmt: skip
        return 0
    if not (args.yes or _confirmed(made)):
        print(f"not run; run it later with: relayflow bulk run {bulk_id}")
        return 1
    return _start(client, made["id"], args)


def _run(client: Api, args: argparse.Namespace) -> int:
    return _start(client, args.bulk_id, args)


def _start(client: Api, bulk_id: str, args: argparse.Namespace) -> int:
    started = client.post(f"/bulk/{quoted(bulk_id)}:run", {"reason": getattr(args, "reason", "")})
    print(progress(started))
    return follow(client, bulk_id) if args.follow else 0


def _list(client: Api, args: argparse.Namespace) -> int:
    found = client.get("/bulk", {"limit": args.limit})["bulk"]
    for doc in found:
        print(progress(doc))
    if not found:
        print("(no bulk actions)")
    return 0


def _status(client: Api, args: argparse.Namespace) -> int:
    doc = client.get(f"/bulk/{quoted(args.bulk_id)}")
    if args.follow:
        return follow(client, args.bulk_id)
    print(summary(doc))
    print(progress(doc))
    for reason, n in (doc.get("skipped_why") or {}).items():
        print(f"  skipped {n}: {render.text(reason)}")
    for line in doc.get("errors") or []:
        print(f"  failed: {render.text(line)}")
    return 0


def _previews(client: Api, args: argparse.Namespace) -> int:
    page = client.get(f"/bulk/{quoted(args.bulk_id)}/previews", {"page": args.page or None})
    print(preview_table(page["previews"]))
    if page.get("next_page") is not None:
        print(f"more: add --page {render.text(page['next_page'])} (of {page['pages']})")
    return 0


def follow(
    client: Api,
    bulk_id: str,
    *,
    out: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Redraw one progress line until the bulk action is over (or paused); its exit status:
    0 done with nothing failed, 1 otherwise."""
    out = out or sys.stdout
    began = time.monotonic()
    tty = out.isatty()
    while True:
        doc = client.get(f"/bulk/{quoted(bulk_id)}")
        line = progress(doc)
        print(f"\r{line}\x1b[K" if tty else line, end="" if tty else "\n", file=out, flush=True)
        if doc["state"] in (*OVER, "paused"):
            break
        if time.monotonic() - began > FOLLOW_TIMEOUT_S:
            print(f"\nstill {doc['state']} after {FOLLOW_TIMEOUT_S:.0f}s", file=sys.stderr)
            return 1
        sleep(FOLLOW_POLL_S)
    if tty:
        print(file=out)
    return 0 if doc["state"] == "done" and not doc.get("failed") else 1


def summary(doc: dict[str, Any]) -> str:
    """What a bulk action is over and what its dry run found."""
    d = render.clean(doc)
    shown = {k: ",".join(v) if isinstance(v, list) else v for k, v in d.get("filter", {}).items()}
    wanted = "  ".join(f"{k}={v}" for k, v in shown.items()) or "(all)"
    refused = d.get("refused") or {}
    lines = [
        f"bulk {d['action']} {d['id']}  ({d['state']})  by {d['by']}: {d['reason']}",
        f"  filter   {wanted}",
        *_reset_line(d),
        f"  matched  {d['matched']}: {d['allowed']} to {d['action']}, "
        f"{d['matched'] - d['allowed']} refused by the dry run",
        f"  pace     {d['rate_per_s']:g} flows/s ({d['batch_size']} a batch)",
    ]
    lines += [f"  refused  {n}: {reason}" for reason, n in refused.items()]
    return "\n".join(lines)


def _reset_line(d: dict[str, Any]) -> list[str]:
    if not d.get("step"):
        return []
    how = "undoing what ran from it first" if d.get("undo", True) else "keeping the effects"
    return [f"  to step  {d['step']}, {how}"]


def progress(doc: dict[str, Any]) -> str:
    """One line: state, flows settled of those matched, done / skipped / failed, what it
    waits for, time left at its pace."""
    d = render.clean(doc)
    settled = d.get("done", 0) + d.get("skipped", 0) + d.get("failed", 0)
    line = (
        f"{d['id']} {d['action']} {d['state']:<9} {settled}/{d['matched']}  "
        f"done {d.get('done', 0)}  skipped {d.get('skipped', 0)}  failed {d.get('failed', 0)}"
    )
    if d.get("waiting"):
        line += f"  waiting: {d['waiting']}"
    if d.get("eta_s") is not None and d["state"] == "running":
        line += f"  ~{d['eta_s']:.0f}s left"
    return line


def preview_table(
    rows: list[dict[str, Any]], *, limit: int | None = None, total: int | None = None
) -> str:
    """Each flow's row: what it was, what the action would do (or did) to it."""
    shown = render.clean(rows[:limit] if limit is not None else rows)
    lines = [f"{'FLOW ID':<36} {'STATUS':<10} {'CODE':<20} {'OUTCOME':<8} WOULD"]
    for r in shown:
        would = _would(r) if r.get("allowed") else f"nothing: {r.get('reason', '')}"
        outcome = r.get("outcome") or "-"
        note = f"  ({r['note']})" if r.get("note") else ""
        lines.append(
            f"{r['flow_id']:<36} {r['status']:<10} {r.get('code') or '':<20} {outcome:<8} "
            f"{would}{note}"
        )
    if not rows:
        lines.append("(no flows match)")
    more = (total if total is not None else len(rows)) - len(shown)
    if more > 0:
        lines.append(f"... and {more} more")
    return "\n".join(lines)


def _would(row: dict[str, Any]) -> str:
    parts = []
    if row.get("rerun"):
        parts.append("run " + ", ".join(row["rerun"]))
    if row.get("undone"):
        parts.append("undo " + ", ".join(row["undone"]))
    if row.get("kept"):
        parts.append("keep " + ", ".join(row["kept"]))
    return "; ".join(parts) or "nothing else"


def _confirmed(made: dict[str, Any]) -> bool:
    """Ask on a terminal; elsewhere (a script, a pipe) no answer is a no."""
    if not sys.stdin.isatty():
        print("add --yes to run it without a terminal to confirm on", file=sys.stderr)
        return False
    answer = input(f"{made['action']} {made['allowed']} flows now? [y/N] ")
    return answer.strip().lower() in ("y", "yes")
