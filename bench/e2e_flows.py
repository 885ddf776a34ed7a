"""Run N registration flows through a fresh local stack and print throughput, latency and cost.

    python bench/e2e_flows.py [--flows 200] [--base-port 8320] [--timeout-s 600]

Prints flows/s, p50/p95 flow latency (start message published -> flow finished; and the run
time, flow doc created -> finished), and per flow: Firestore
reads and writes, Cloud Tasks tasks created, Pub/Sub messages. Counts come from the services'
own counters (GET /stats on worker and poller), the Cloud Tasks emulator's /stats, and the
batch itself; the start function's Firestore cost is one create per start message by
construction (it has no /stats route: functions-framework owns its HTTP surface).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402


def _get(url: str) -> dict[str, Any]:
    response = requests.get(url, timeout=10)
    response.raise_for_status()
    return dict(response.json())


def _counters(ports: Ports) -> dict[str, int]:
    total: dict[str, int] = {}
    for port in (ports.worker, ports.poller):
        for name, value in _get(f"http://{HOST}:{port}/stats")["counters"].items():
            total[name] = total.get(name, 0) + int(value)
    tasks = _get(f"http://{HOST}:{ports.cloud_tasks_rest}/stats")
    total["ct_created"] = int(tasks["created"])
    total["ct_dispatched"] = int(tasks["dispatched"])
    return total


def measure(flows: int, timeout_s: float, base_port: int) -> int:
    """Runs inside the stack's environment (a child process), so the clients find it."""
    from google.cloud.pubsub_v1 import SubscriberClient

    from relayflow.cli.batch import Planned, ResultWatcher, percentile, run_batch
    from relayflow.gcp.events import Events, build_publisher
    from relayflow.gcp.store import FlowStore, build_client
    from relayflow.settings import load_settings

    ports = Ports(base_port)
    settings = load_settings()
    run = uuid.uuid4().hex[:6]
    planned = [
        Planned(
            flow_id=f"bench-{run}-{i:05d}",
            body={
                "flow": "registration",
                "flow_id": f"bench-{run}-{i:05d}",
                "input": {"resource": f"bench-{run}-{i}"},
            },
        )
        for i in range(flows)
    ]
    store = FlowStore(build_client(settings))
    watcher = ResultWatcher(SubscriberClient(), settings.project_id, "flow-results")
    before = _counters(ports)
    try:
        report = run_batch(
            planned,
            events=Events(build_publisher(), project=settings.project_id),
            store=store,
            watcher=watcher,
            topic="flow-requests",
            timeout_s=timeout_s,
            progress=lambda done, total, t: print(f"  {done}/{total} ended  {t:6.1f}s", flush=True),
        )
    finally:
        watcher.close()
    after = _counters(ports)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    n = len(report.records)
    durations = report.durations_s()
    statuses = report.by_status()
    # The start function: one create (write) per start message, and the message itself.
    reads = delta.get("firestore_reads", 0)
    writes = delta.get("firestore_writes", 0) + flows
    lines = {
        "flows": flows,
        "statuses": statuses,
        "wall_s": round(report.elapsed_s, 2),
        "flows_per_s": round(n / report.elapsed_s, 2) if report.elapsed_s else 0.0,
        # publish -> terminal, what a publisher waits; and doc created -> terminal.
        "latency_p50_s": round(percentile(report.latencies_s(), 50), 3),
        "latency_p95_s": round(percentile(report.latencies_s(), 95), 3),
        "run_time_p50_s": round(percentile(durations, 50), 3),
        "run_time_p95_s": round(percentile(durations, 95), 3),
        "polls_per_flow": round(sum(r.polls for r in report.records) / max(n, 1), 2),
        "per_flow": {
            "firestore_reads": round(reads / max(n, 1), 2),
            "firestore_writes": round(writes / max(n, 1), 2),
            "tasks_created": round(delta["ct_created"] / max(n, 1), 2),
            "tasks_dispatched": round(delta["ct_dispatched"] / max(n, 1), 2),
            "pubsub_messages": round((flows + delta.get("messages_published", 0)) / max(n, 1), 2),
        },
    }
    print(json.dumps(lines, indent=2))
    return 0 if statuses.get("SUCCEEDED", 0) == flows else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", type=int, default=200)
    parser.add_argument("--base-port", type=int, default=8320)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.flows <= 100_000:
        parser.error("--flows must be in 1..100000")
    if args.measure:
        return measure(args.flows, args.timeout_s, args.base_port)
    with tempfile.TemporaryDirectory(prefix="relayflow-bench-") as state_dir:
        stack = Stack(ports=Ports(args.base_port), state_dir=Path(state_dir))
        print(f"starting a local stack on base port {args.base_port} …", flush=True)
        stack.up()
        try:
            argv = [sys.executable, __file__, "--measure", *sys.argv[1:]]
            env = {**os.environ, **stack.env()}
            return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
        finally:
            stack.down()


if __name__ == "__main__":
    sys.exit(main())
