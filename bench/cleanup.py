"""Undo until it is done, timed on a local stack: a registration flow whose every response is
lost while the client API fails for --outage-s seconds (each call takes effect, then answers
500), so its register step fails and its undo cannot be done either.

    python bench/cleanup.py [--outage-s 60] [--base-port 8520]

Twice: as it is, and with the worker SIGKILLed while the clean-up's undo is in flight (the API
answers the undo 6 s late; `local up` brings the worker back). For each it prints when the flow
ended (seconds after the outage began, and whether the API was still down then), when its
clean-up was over (seconds after the API came back), its state, and the registrations left
live at the client API (the target: FAILED before the outage ends, clean-up done, 0 live).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from chaos import CHAOS_ENV, client_api, pids  # noqa: E402

from relayflow.gcp.store.keys import document_id  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.ports import Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

LOSE_EVERY_RESPONSE = [{"status": 500, "after_effect": True, "count": None}]
SLOW_UNDO = [{"method": "DELETE", "path_prefix": "/registrations", "delay_s": 6, "count": 1}]


def flow_doc(db: Any, flow_id: str) -> dict[str, Any]:
    snap = db.collection("flows").document(document_id(flow_id)).get()
    return (snap.to_dict() or {}) if snap.exists else {}


def wait_for(check: Any, timeout_s: float) -> float:
    """Seconds until ``check()`` holds (a bench polling Firestore, not a handler)."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout_s:
            raise TimeoutError("gave up waiting")
        threading.Event().wait(0.2)
    return time.monotonic() - began


def run(stack: Stack, db: Any, outage_s: float, *, kill: bool) -> dict[str, Any]:
    from relayflow.gcp.events import Events, build_publisher

    client_api(stack, "DELETE", "/admin/faults")
    flow_id = f"cleanup-{'kill' if kill else 'plain'}-{uuid.uuid4().hex[:6]}"
    client_api(stack, "POST", "/admin/faults", json=LOSE_EVERY_RESPONSE)
    down_at = time.monotonic()
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    Events(build_publisher(), project="relayflow-local").publish("flow-requests", body)
    wait_for(lambda: flow_doc(db, flow_id).get("status") in ("FAILED", "TIMED_OUT"), 300)
    ended_s = time.monotonic() - down_at
    ended = flow_doc(db, flow_id)
    threading.Event().wait(max(0.0, outage_s - (time.monotonic() - down_at)))
    client_api(stack, "DELETE", "/admin/faults")
    back_at = time.monotonic()
    if kill:
        client_api(stack, "POST", "/admin/faults", json=SLOW_UNDO)
        claimed = lambda: bool(  # noqa: E731
            ((flow_doc(db, flow_id).get("tracks") or {}).get("~cleanup") or {}).get("claim")
        )
        wait_for(claimed, 300)
        os.killpg(pids(stack)["worker"], signal.SIGKILL)
        stack.up()  # heals what died
    over = lambda: (flow_doc(db, flow_id).get("cleanup") or {}).get("state") != "pending"  # noqa: E731
    wait_for(over, 600)
    cleaned_s = time.monotonic() - back_at
    live = client_api(stack, "GET", "/stats?detail=1")["live"]["registrations_by_resource"]
    return {
        "run": "worker killed mid-undo" if kill else "as it is",
        "status": ended.get("status"),
        "ended_s": ended_s,
        "down_at_end": ended_s < outage_s,
        "cleanup_at_end": (ended.get("cleanup") or {}).get("state"),
        "cleaned_s": cleaned_s,
        "cleanup": (flow_doc(db, flow_id).get("cleanup") or {}).get("state"),
        "live": len(live.get(flow_id, [])),
    }


def table(rows: list[dict[str, Any]], outage_s: float) -> str:
    head = (
        f"{'run':<24} {'ended':>9} {'API down then':>13} {'clean-up':>9} "
        f"{'over after':>10} {'state':>9} {'live':>5}  target"
    )
    lines = [f"outage {outage_s:.0f} s of lost responses", head, "-" * len(head)]
    for r in rows:
        ok = r["status"] == "FAILED" and r["down_at_end"] and r["cleanup"] == "done"
        ok = ok and r["live"] == 0
        lines.append(
            f"{r['run']:<24} {r['ended_s']:>7.1f} s {'yes' if r['down_at_end'] else 'no':>13} "
            f"{r['cleanup_at_end']!s:>9} {r['cleaned_s']:>8.1f} s {r['cleanup']!s:>9} "
            f"{r['live']:>5}  {'met' if ok else 'MISSED'}"
        )
    return "\n".join(lines)


def inner(args: argparse.Namespace) -> int:
    from google.cloud import firestore

    with tempfile.TemporaryDirectory(prefix="relayflow-cleanup-") as tmp:
        stack = Stack(
            ports=Ports(args.base_port),
            state_dir=Path(tmp),
            base_env={**os.environ, **CHAOS_ENV},
            sweep_interval_s=5.0,
        )
        print(f"starting a local stack (base port {args.base_port}) …", flush=True)
        stack.up()
        try:
            db = firestore.Client(project="relayflow-local")
            rows = []
            for kill in (False, True):
                print(f"  {'killing the worker mid-undo' if kill else 'as it is'} …", flush=True)
                rows.append(run(stack, db, args.outage_s, kill=kill))
        finally:
            stack.down()
    print(table(rows, args.outage_s))
    met = all(r["cleanup"] == "done" and r["live"] == 0 and r["down_at_end"] for r in rows)
    return 0 if met else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--base-port", type=int, default=8520)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 5 <= args.outage_s <= 3600:
        parser.error("--outage-s must be 5..3600")
    if args.inner:
        return inner(args)
    env = {**os.environ, **relayflow_env(Ports(args.base_port)), **CHAOS_ENV}
    argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
    return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
