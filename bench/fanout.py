"""One flow with a ForEach of 1,000 items at concurrency 50, and of 100 items, on a fresh
local stack each: wall time, Firestore writes and write conflicts per item, tasks per item, and
the 1,000-item run's figures as a ratio of the 100-item run's.

    python bench/fanout.py [--items 1000] [--small 100] [--base-port 8520] [--children]

``--children``: each item is a child flow (bench/children_app.py's ``batch``: a ForEach of
ChildFlow steps, one ``payment`` flow each), and the parent's document size in bytes is shown
too: item outputs stay in the children, so it must not grow with the item count.

Item state lives in lane documents (one per concurrent item), so the figures per item should
not grow with the number of items; the flow's own document is written a few times per lane.
Counts come from the worker's and poller's counters (GET /stats) and the Cloud Tasks emulator's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from relayflow.core.records import FlowRecord  # noqa: E402
from relayflow.gcp.store.keys import document_id  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.ports import Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_flows import service_counters  # noqa: E402

APP = "fanout_app:registry"
CHILDREN_APP = "children_app:registry"


def run_one(items: int, base_port: int, *, children: bool = False) -> dict[str, Any]:
    """A fresh stack, one flow of ``items`` items; its figures."""
    from google.cloud import firestore

    from relayflow.gcp.events import Events, build_publisher

    with tempfile.TemporaryDirectory(prefix="relayflow-fanout-") as state:
        stack = Stack(
            ports=Ports(base_port),
            state_dir=Path(state),
            app=CHILDREN_APP if children else APP,
            app_path=BENCH,
            sweep_interval_s=0,
            # this checkout's relayflow, whatever the virtualenv has installed
            base_env={**os.environ, "PYTHONPATH": os.pathsep.join((str(BENCH), str(REPO)))},
        )
        stack.up()
        try:
            before = service_counters(stack.ports)
            flow_id = f"fanout-{items}"
            flow = "batch" if children else "fanout"
            body = {"flow": flow, "flow_id": flow_id, "input": {"items": items}}
            started = time.monotonic()
            Events(build_publisher(), project="relayflow-local").publish("flow-requests", body)
            db = firestore.Client(project="relayflow-local")
            status = wait(db, flow_id, items, timeout_s=max(1200.0, items * 0.6))
            wall_s = time.monotonic() - started
            delta = {k: v - before.get(k, 0) for k, v in service_counters(stack.ports).items()}
            parent_bytes = document_bytes(db, flow_id)
        finally:
            stack.down()
    return {
        "items": items,
        "status": status,
        "wall_s": round(wall_s, 2),
        "items_per_s": round(items / wall_s, 1),
        "writes_per_item": round(delta.get("firestore_writes", 0) / items, 2),
        "conflicts_per_item": round(delta.get("firestore_conflicts", 0) / items, 3),
        "tasks_per_item": round(delta.get("ct_created", 0) / items, 2),
        "parent_doc_bytes": parent_bytes,
    }


def document_bytes(db: Any, flow_id: str) -> int:
    """The flow document's size as its JSON (near Firestore's own count: field names and
    values; https://cloud.google.com/firestore/docs/storage-size)."""
    doc = db.collection("flows").document(document_id(flow_id)).get().to_dict() or {}
    return len(FlowRecord.from_doc(doc).model_dump_json().encode("utf-8"))


def wait(db: Any, flow_id: str, items: int, timeout_s: float = 1200.0) -> str:
    deadline = time.monotonic() + timeout_s
    ref = db.collection("flows").document(document_id(flow_id))
    shown = -1.0
    while time.monotonic() < deadline:
        doc = ref.get().to_dict() or {}
        status = str(doc.get("status", "PENDING"))
        if status in ("SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED"):
            return status
        done = sum(1 for _ in db.collection("flow_lanes").where("parent", "==", flow_id).stream())
        if done != shown:
            print(f"    {items} items: {status}, {done} lanes", flush=True)
            shown = done
        time.sleep(1.0)  # a bench watching from outside, not a handler
    return "STUCK"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--base-port", type=int, default=8520)
    parser.add_argument("--children", action="store_true", help="each item a child flow")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.small < args.items <= 10_000:
        parser.error("need 1 <= --small < --items <= 10000")
    if not args.inner:
        env = {**os.environ, **relayflow_env(Ports(args.base_port))}
        argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
        return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
    small = run_one(args.small, args.base_port, children=args.children)
    large = run_one(args.items, args.base_port, children=args.children)
    figures = ("wall_s", "writes_per_item", "conflicts_per_item", "tasks_per_item")
    ratio = {
        k: round(large[k] / small[k], 2) if small[k] else None
        for k in (*figures, "parent_doc_bytes")
    }
    print(json.dumps({"small": small, "large": large, "large_over_small": ratio}, indent=2))
    return 0 if small["status"] == large["status"] == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
