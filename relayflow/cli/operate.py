"""The operator commands: read flows and act on them through the api, as the console does.

    relayflow status ID [--json]
    relayflow list [--flow F] [--status S] [--version N] [--updated-from T] [--updated-to T]
                   [--limit N] [--cursor C] [--counts] [--json]
    relayflow cancel ID --reason WHY [--wait]      relayflow retry ID --reason WHY [--wait]
    relayflow reset ID --to-step STEP --reason WHY [--keep-effects] [--dry-run] [--wait]
    relayflow tenants list | pause TENANT --reason WHY | resume TENANT --reason WHY
    relayflow schedules list | pause NAME --reason WHY | resume NAME --reason WHY
    relayflow schedules trigger NAME --reason WHY [--flow-id ID]
    relayflow signal ID NAME --reason WHY [--data JSON] [--id SIGNAL_ID] [--item N]
    relayflow breakers
    relayflow rejected list [--limit N] [--cursor C]
    relayflow dead-letters list [--limit N]
    relayflow dead-letters replay MESSAGE_ID --reason WHY [--edit-json JSON]

Standard library only (and nothing that imports a Google client), so each command starts in
milliseconds; see bench/cli_startup.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from relayflow.cli import render
from relayflow.cli.api import Api, quoted

LOCAL_HINT = (
    "start the local stack with `relayflow local up` and run `source .relayflow/local/env` "
    "first; in the cloud, run the environment's api_proxy_command (`gcloud run services proxy "
    "api --port 8080` with a token minted for the api's URL) and set "
    "RELAYFLOW_API_URL=http://127.0.0.1:8080"
)
WAIT_POLL_S = 0.5
WAIT_TIMEOUT_S = 1800.0


def api() -> Api:
    return Api.from_env(os.environ, hint=LOCAL_HINT)


def cmd_status(args: argparse.Namespace) -> int:
    query = {**_whose(args), **({"resolve": "true"} if args.resolve else {})}
    doc = api().get(f"/flows/{quoted(args.flow_id)}", query)
    print(render.as_json(doc) if args.json else render.flow(doc))
    return 0


def _whose(args: argparse.Namespace) -> dict[str, str]:
    """``?tenant=`` when the command names the flow's tenant."""
    return {"tenant": args.tenant} if getattr(args, "tenant", None) else {}


def _flow_path(flow_id: str, action: str = "") -> str:
    return f"/flows/{quoted(flow_id)}{action}"


def cmd_list(args: argparse.Namespace) -> int:
    query = {
        "flow": args.flow,
        "status": args.status,
        "version": args.version,
        "tenant": args.tenant,
        "parent": getattr(args, "parent", None),
        "label": list(getattr(args, "label", None) or []),
        "code": getattr(args, "code", None),
        "dependency": getattr(args, "dependency", None),
        "updated_from": args.updated_from,
        "updated_to": args.updated_to,
        "limit": args.limit,
        "cursor": args.cursor,
        "counts": "true" if args.counts else None,
    }
    page = api().get("/flows", query)
    if args.json:
        print(render.as_json(page))
        return 0
    if args.counts:
        print(render.counts(page["counts"]))
    print(render.flow_table(page["flows"]))
    if page.get("next_cursor"):
        print(f"more: add --cursor {render.text(page['next_cursor'])}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    client = api()
    doc = client.post(_query(_flow_path(args.flow_id, ":cancel"), args), {"reason": args.reason})
    print(f"cancel of {args.flow_id} recorded ({render.text(doc['status'])}): {args.reason}")
    return _follow(client, doc, until=render.TERMINAL) if args.wait else 0


def cmd_retry(args: argparse.Namespace) -> int:
    client = api()
    doc = client.post(_query(_flow_path(args.flow_id, ":retry"), args), {"reason": args.reason})
    generation = render.text(doc["position"]["generation"])
    print(f"retry of {args.flow_id} recorded: generation {generation} started ({args.reason})")
    return _follow(client, doc, until=render.TERMINAL) if args.wait else 0


def cmd_undo(args: argparse.Namespace) -> int:
    client = api()
    doc = client.post(_query(_flow_path(args.flow_id, ":undo"), args), {"reason": args.reason})
    print(f"undo of {args.flow_id} recorded: its clean-up undoes what it left ({args.reason})")
    return _follow(client, doc, until=render.TERMINAL, cleanup=True) if args.wait else 0


def cmd_reset(args: argparse.Namespace) -> int:
    """Reset a flow to a step; with ``--dry-run``, print what that would do and do nothing.
    Either way the dry run's table comes first, so what is done was shown."""
    client = api()
    path = _query(_flow_path(args.flow_id, ":reset"), args)
    body = {"step": args.step, "reason": args.reason, "undo": not args.keep_effects}
    preview = client.post(path, {**body, "dry_run": True})
    print(render.preview_table([preview]))
    if args.dry_run or not preview.get("allowed"):
        return 0 if preview.get("allowed") else 1
    doc = client.post(path, {**body, "dry_run": False})
    generation = render.text(doc["position"]["generation"])
    print(
        f"reset of {args.flow_id} to {args.step} recorded: generation {generation} started "
        f"({args.reason})"
    )
    return _follow(client, doc, until=render.TERMINAL) if args.wait else 0


def cmd_signal(args: argparse.Namespace) -> int:
    """Send a signal; what became of it (delivered, kept, a duplicate). One nothing takes is
    the api's 4xx, printed with why (an ended or unknown flow, a name it never waits for)."""
    body: dict[str, Any] = {"data": args.data, "reason": args.reason}
    if args.signal_id:
        body["signal_id"] = args.signal_id
    if args.item is not None:
        body["item"] = args.item
    path = _flow_path(args.flow_id, f"/signals/{quoted(args.name)}")
    done = api().post(_query(path, args), body)
    outcome = render.text(done["outcome"])
    said = {
        "delivered": "delivered: the step that waited for it went on",
        "kept": "kept: no step waits for it yet; the flow takes it when one does",
        "duplicate": "a duplicate: that signal id was sent already, nothing changed",
    }.get(outcome, outcome)
    print(f"signal {args.name} to {args.flow_id} {said} ({args.reason})")
    return 0


def _query(path: str, args: argparse.Namespace) -> str:
    """``path`` with ``?tenant=`` when the command names the flow's tenant."""
    whose = _whose(args)
    return f"{path}?tenant={quoted(whose['tenant'])}" if whose else path


def cmd_tenants(args: argparse.Namespace) -> int:
    client = api()
    if args.tenants_action == "list":
        print(render.tenant_table(client.get("/tenants")["tenants"]))
        return 0
    done = client.post(
        f"/tenants/{quoted(args.tenant)}:{args.tenants_action}", {"reason": args.reason}
    )
    state = "paused" if done["paused"] else "resumed"
    who, by = render.text(done["tenant"]), render.text(done["by"])
    print(f"tenant {who} {state} by {by}: {args.reason}")
    if not done["paused"]:
        brought = int(done.get("brought_forward", 0))
        print(
            f"its flows go on where they were: {brought} put-off task(s) brought forward now; "
            "waiting ones are admitted now"
        )
    return 0


def cmd_schedules(args: argparse.Namespace) -> int:
    client = api()
    if args.schedules_action == "list":
        print(render.schedule_table(client.get("/schedules")["schedules"]))
        return 0
    name = quoted(args.schedule)
    body = {"reason": args.reason}
    if args.schedules_action == "trigger":
        if args.flow_id:
            body["flow_id"] = args.flow_id
        run = client.post(f"/schedules/{name}:trigger", body)
        note = f" ({render.text(run['note'])})" if run.get("note") else ""
        run_id = render.text(run["flow_id"])
        print(f"schedule {render.text(args.schedule)}: {run['outcome']} {run_id}{note}")
        return 0 if run["outcome"] in ("started", "duplicate") else 1
    done = client.post(f"/schedules/{name}:{args.schedules_action}", body)
    state = "paused" if done["paused"] else "resumed"
    who, by = render.text(done["schedule"]), render.text(done["by"])
    print(f"schedule {who} {state} by {by}: {args.reason}")
    return 0


def cmd_breakers(args: argparse.Namespace) -> int:
    print(render.breaker_table(api().get("/breakers")["breakers"]))
    return 0


def cmd_rejected(args: argparse.Namespace) -> int:
    page = api().get("/rejected", {"limit": args.limit, "cursor": args.cursor})
    print(render.rejected_table(page["rejected"]))
    if page.get("next_cursor"):
        print(f"more: add --cursor {render.text(page['next_cursor'])}")
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:
    client = api()
    if args.dead_letters_action == "list":
        # The hold is read by pulling, which waits about a second for what may still come.
        _note("reading the dead-letter hold…")
        print(
            render.dead_letter_table(
                client.get("/dead-letters", {"limit": args.limit})["dead_letters"]
            )
        )
        return 0
    body: dict[str, Any] = {"reason": args.reason}
    if args.edit_json is not None:
        body["data"] = args.edit_json
    _note(f"looking for dead letter {args.message_id} and replaying it…")
    done = client.post(f"/dead-letters/{quoted(args.message_id)}:replay", body)
    replayed, message_id = render.text(done["replayed"]), render.text(done["message_id"])
    print(f"replayed {replayed} as message {message_id}")
    return 0


def _follow(
    client: Api,
    doc: dict[str, Any],
    *,
    until: frozenset[str],
    cleanup: bool = False,
    out: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print each new history entry of the flow until its status is in ``until`` (and, with
    ``cleanup``, its clean-up is over)."""
    out = out or sys.stdout
    shown = _total(doc)
    began = time.monotonic()
    path = _flow_path(doc["flow_id"])
    whose = {"tenant": doc.get("tenant", "default")}
    while doc["status"] not in until or (cleanup and _cleaning(doc)):
        if time.monotonic() - began > WAIT_TIMEOUT_S:
            status = render.text(doc["status"])
            print(f"still {status} after {WAIT_TIMEOUT_S:.0f}s", file=sys.stderr)
            return 1
        sleep(WAIT_POLL_S)
        doc = client.get(path, whose)
        for e in _new_entries(doc, shown):
            print(render.entry(e), file=out, flush=True)
        shown = _total(doc)
    print(f"{render.text(doc['flow_id'])} is {render.text(doc['status'])}", file=out)
    return 0


def _cleaning(doc: dict[str, Any]) -> bool:
    cleanup = doc.get("cleanup")
    return isinstance(cleanup, dict) and cleanup.get("state") == "pending"


def _total(doc: dict[str, Any]) -> int:
    return int(doc.get("history_dropped", 0)) + len(doc.get("history") or [])


def _new_entries(doc: dict[str, Any], shown: int) -> list[dict[str, Any]]:
    history = list(doc.get("history") or [])
    fresh = _total(doc) - shown
    return history[len(history) - fresh :] if fresh > 0 else []


def _note(line: str) -> None:
    """Progress, on stderr: stdout stays what the command prints."""
    print(line, file=sys.stderr, flush=True)
