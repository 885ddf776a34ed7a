"""Payload offload on a fresh local stack (bench/offload_app.py, the gcp-storage-emulator as the
bucket): one flow whose step returns ``--mib`` MiB (20), then a ForEach over ``--items`` items
(10,000) whose outputs total ``--total-mib`` MiB (50). For each: wall time, the flow document's
size, the largest lane document's, and the objects written to the bucket.

    python bench/offload.py [--mib 20] [--items 10000] [--total-mib 50] [--base-port 33500]

The figures the README quotes; tests/e2e/test_offload.py runs smaller ones in CI.
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
from relayflow.core.state import TERMINAL  # noqa: E402
from relayflow.gcp.store import FlowStore  # noqa: E402
from relayflow.local.environment import OFFLOAD_BUCKET, relayflow_env  # noqa: E402
from relayflow.local.ports import Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

APP = "offload_app:registry"
PROJECT = "relayflow-local"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=float, default=20.0)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--total-mib", type=float, default=50.0)
    parser.add_argument("--base-port", type=int, default=33500)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.items <= 10_000 or not 0 < args.mib <= 90 or args.total_mib <= 0:
        parser.error("need 1 <= --items <= 10000, 0 < --mib <= 90, --total-mib > 0")
    if not args.inner:  # the stack's emulator variables, for this process's own clients
        env = {**os.environ, **relayflow_env(Ports(args.base_port))}
        argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
        return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
    rows = run(args)
    print(json.dumps(rows, indent=2))
    return 0 if all(row["status"] == "SUCCEEDED" for row in rows) else 1


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="relayflow-offload-") as state:
        stack = Stack(
            ports=Ports(args.base_port),
            state_dir=Path(state),
            app=APP,
            app_path=BENCH,
            sweep_interval_s=0,
            base_env={**os.environ, "PYTHONPATH": os.pathsep.join((str(BENCH), str(REPO)))},
        )
        stack.up()
        try:
            big = one("payload", {"mib": args.mib, "seed": "bench"}, timeout_s=600)
            item_bytes = int(args.total_mib * 1024 * 1024 / args.items)
            fan_in = {"items": args.items, "item_bytes": item_bytes}
            fan = one("payload-fanout", fan_in, timeout_s=max(600.0, args.items * 0.5))
        finally:
            stack.down()
    return [
        {"flow": f"a step returning {args.mib:g} MiB", **big},
        {"flow": f"ForEach of {args.items} items, {item_bytes} bytes each", **fan},
    ]


def one(flow: str, input: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
    """Start one flow, wait for its end; its figures."""
    from google.cloud import firestore

    from relayflow.gcp import blobs
    from relayflow.gcp.events import Events, build_publisher

    storage = blobs.build_client(PROJECT)
    before = sum(1 for _ in storage.list_blobs(OFFLOAD_BUCKET))
    flow_id = f"bench-{flow}-{int(time.time())}"
    started = time.monotonic()
    Events(build_publisher(), project=PROJECT).publish(
        "flow-requests", {"flow": flow, "flow_id": flow_id, "input": input}
    )
    store = FlowStore(firestore.Client(project=PROJECT))
    record = wait(store, flow_id, timeout_s)
    wall_s = time.monotonic() - started
    listed = list(storage.list_blobs(OFFLOAD_BUCKET))
    lanes = [doc_bytes(store.get(lane)) for lane in record.lanes] if record else []
    return {
        "status": str(record.status) if record else "STUCK",
        "wall_s": round(wall_s, 1),
        "flow_doc_bytes": doc_bytes(record),
        "largest_lane_doc_bytes": max(lanes, default=None),
        "objects_written": len(listed) - before,
        "bytes_in_bucket": sum(b.size or 0 for b in listed),
        "result": record.outputs.get("summarize") or record.outputs.get("check")
        if record
        else None,
    }


def doc_bytes(record: FlowRecord | None) -> int:
    """A document's size as its JSON (near Firestore's own count)."""
    return 0 if record is None else len(record.model_dump_json().encode())


def wait(store: FlowStore, flow_id: str, timeout_s: float) -> FlowRecord | None:
    deadline = time.monotonic() + timeout_s
    shown = ""
    while time.monotonic() < deadline:
        record = store.get(flow_id)
        status = str(record.status) if record else "PENDING"
        if record is not None and record.status in TERMINAL:
            return record
        if status != shown:
            print(f"    {flow_id}: {status}", flush=True)
            shown = status
        time.sleep(1.0)  # a bench watching from outside, not a handler
    return None


if __name__ == "__main__":
    sys.exit(main())
