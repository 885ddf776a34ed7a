"""Fairness between tenants: tenant A starts 1,000 flows, then tenant B starts 10. B's p95
completion time against B's alone, and A's quota checked against what ran.

    python bench/tenants.py [--a-flows 1000] [--b-flows 10] [--a-max-running 50]
                            [--a-starts-per-s 20] [--activation-s 5] [--base-port 8480]

One local stack, with ``RELAYFLOW_TENANTS`` limiting tenant A (B has no limit). First B's
flows run alone; then A's are published, and B's once A's are all published. Printed:

    B alone / B behind A    p50 and p95 from publish to end, and their ratio (target <= 2x)
    A most running          the most of A's flows running at once (admitted and not ended,
                            from each flow's admission entry and end), against max_running
    A start rate            the most of A's admissions in any one second, against starts_per_s
    slot contention         Firestore writes and write conflicts per A flow in the worker and
                            poller (where ending flows free slots and admit the next ones)

Firestore is wiped between the two runs; the client API activates registrations after
--activation-s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from chaos import client_api, wait_terminal  # noqa: E402

from relayflow.gcp.store.keys import document_id, key_of  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

ENV = {"RELAYFLOW_SWEEP_GRACE_S": "30"}
# The services with counters (GET /stats): where flows end, free slots and admit the next.
SERVICES = ("worker", "poller")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


def publish(bodies: list[dict[str, Any]]) -> dict[str, float]:
    """Publish each start message; the wall time each was published at, by flow id."""
    from relayflow.gcp.events import Events, build_publisher

    events = Events(build_publisher(), project="relayflow-local")
    sent: dict[str, float] = {}

    def one(body: dict[str, Any]) -> None:
        # Each tenant publishes on its own topic (publishers are bound to tenants).
        topic = f"flow-requests.{body['tenant']}"
        events.submit(topic, json.dumps(body).encode()).result(timeout=60)
        sent[body["flow_id"]] = time.time()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, bodies))
    return sent


def bodies_for(tenant: str, count: int, run: str) -> list[dict[str, Any]]:
    return [
        {
            "flow": "registration",
            "flow_id": f"{tenant}-{run}-{i:04d}",
            "tenant": tenant,
            "input": {"resource": f"{tenant}-{run}-{i}"},
        }
        for i in range(count)
    ]


def documents(flow_ids: list[str]) -> dict[str, dict[str, Any]]:
    from google.cloud import firestore

    db = firestore.Client(project="relayflow-local")
    refs = [db.collection("flows").document(document_id(f)) for f in flow_ids]
    return {key_of(s.id): s.to_dict() or {} for s in db.get_all(refs) if s.exists}


def completion_s(docs: dict[str, dict[str, Any]], sent: dict[str, float]) -> list[float]:
    return [
        doc["finished_at"].timestamp() - sent[flow_id]
        for flow_id, doc in docs.items()
        if doc.get("finished_at") is not None
    ]


def admitted_at(doc: dict[str, Any]) -> datetime:
    """When the flow began to run: its admission entry, or its creation if it never waited."""
    for entry in doc.get("history") or []:
        if entry.get("outcome") == "admitted":
            when: datetime = entry["at"]
            return when
    created: datetime = doc["created_at"]
    return created


def most_running(docs: dict[str, dict[str, Any]]) -> int:
    """The most flows running at once: admitted and not yet ended."""
    edges: list[tuple[float, int]] = []
    for doc in docs.values():
        edges.append((admitted_at(doc).timestamp(), 1))
        edges.append((doc["finished_at"].timestamp(), -1))
    running = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # ends first on a tie
        running += step
        peak = max(peak, running)
    return peak


def most_admitted_per_second(docs: dict[str, dict[str, Any]]) -> int:
    times = sorted(admitted_at(doc).timestamp() for doc in docs.values())
    best, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= 1.0:
            first += 1
        best = max(best, last - first + 1)
    return best


def counters(stack: Stack) -> dict[str, int]:
    """The services' Firestore counters, summed (GET /stats of each)."""
    total: dict[str, int] = {}
    for name in SERVICES:
        port = getattr(stack.ports, name)
        found = requests.get(f"http://{HOST}:{port}/stats", timeout=10).json()
        for key, value in (found.get("counters") or found).items():
            if isinstance(value, int):
                total[key] = total.get(key, 0) + value
    return total


def wait_started(db: Any, tenant: str, count: int, timeout_s: float) -> float:
    """Until ``count`` flows of ``tenant`` exist (started: running or waiting for the quota);
    how long that took. Counted by an aggregation, not by reading each."""
    from google.cloud.firestore_v1.base_query import FieldFilter

    began = time.monotonic()
    query = db.collection("flows").where(filter=FieldFilter("tenant", "==", tenant))
    shown = -1
    while time.monotonic() - began < timeout_s:
        (result,) = query.count(alias="n").get()
        found = int(result[0].value)
        if found != shown:
            print(f"    {found}/{count} of {tenant}'s flows started", flush=True)
            shown = found
        if found >= count:
            return time.monotonic() - began
        threading.Event().wait(1.0)
    raise TimeoutError(f"only {shown} of {count} of {tenant}'s flows started")


def run_b_alone(stack: Stack, args: argparse.Namespace) -> list[float]:
    stack.wipe_firestore()
    client_api(stack, "POST", "/admin/reset")
    client_api(stack, "POST", "/admin/config", json={"activation_delay_s": args.activation_s})
    b = bodies_for("b", args.b_flows, uuid.uuid4().hex[:6])
    sent = publish(b)
    from google.cloud import firestore

    wait_terminal(firestore.Client(project="relayflow-local"), list(sent), args.timeout_s)
    return completion_s(documents(list(sent)), sent)


def run_behind_a(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    from google.cloud import firestore

    stack.wipe_firestore()
    client_api(stack, "POST", "/admin/reset")
    client_api(stack, "POST", "/admin/config", json={"activation_delay_s": args.activation_s})
    run = uuid.uuid4().hex[:6]
    before = counters(stack)
    a_sent = publish(bodies_for("a", args.a_flows, run))
    db = firestore.Client(project="relayflow-local")
    started_s = wait_started(db, "a", args.a_flows, args.timeout_s)
    print(f"    A's {args.a_flows} flows started in {started_s:.1f}s; now B's", flush=True)
    b_sent = publish(bodies_for("b", args.b_flows, run))
    wait_terminal(db, list(b_sent), args.timeout_s)
    b_done = time.time()
    wait_terminal(db, list(a_sent), args.timeout_s)
    after = counters(stack)
    a_docs = documents(list(a_sent))
    return {
        "b": completion_s(documents(list(b_sent)), b_sent),
        "b_done_after_a_published_s": b_done - max(a_sent.values()),
        "a_ok": sum(1 for d in a_docs.values() if d.get("status") == "SUCCEEDED"),
        "a_most_running": most_running(a_docs),
        "a_most_admitted_per_s": most_admitted_per_second(a_docs),
        "a_wall_s": max(d["finished_at"].timestamp() for d in a_docs.values())
        - min(a_sent.values()),
        "conflicts": after.get("firestore_conflicts", 0) - before.get("firestore_conflicts", 0),
        "writes": after.get("firestore_writes", 0) - before.get("firestore_writes", 0),
    }


def report(alone: list[float], behind: dict[str, Any], args: argparse.Namespace) -> str:
    a_p95, b_p95 = percentile(alone, 0.95), percentile(behind["b"], 0.95)
    admissions = args.a_flows
    lines = [
        f"B alone       ({len(alone)} flows): p50 {percentile(alone, 0.5):6.2f}s  "
        f"p95 {a_p95:6.2f}s",
        f"B behind A    ({len(behind['b'])} flows): p50 {percentile(behind['b'], 0.5):6.2f}s  "
        f"p95 {b_p95:6.2f}s",
        f"B p95 behind A / alone: {b_p95 / max(a_p95, 1e-9):.2f}x (target <= 2x)",
        f"A: {behind['a_ok']}/{args.a_flows} succeeded in {behind['a_wall_s']:.1f}s; most running "
        f"at once {behind['a_most_running']} (max_running {args.a_max_running}); most admitted "
        f"in one second {behind['a_most_admitted_per_s']} (starts_per_s {args.a_starts_per_s:g})",
        f"Firestore in the worker and poller, A+B run: {behind['writes'] / admissions:.2f} "
        f"writes and {behind['conflicts'] / admissions:.3f} conflicts per A flow",
    ]
    ok = behind["a_most_running"] <= args.a_max_running and b_p95 <= 2 * a_p95
    lines.append("target met" if ok else "TARGET MISSED")
    return "\n".join(lines)


def tenants_policy(args: argparse.Namespace) -> str:
    a = {"max_running": args.a_max_running, "starts_per_s": args.a_starts_per_s}
    return json.dumps({"tenants": {"a": a, "b": {}}})  # B named: it gets its own topic


def inner(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="relayflow-tenants-") as tmp:
        env = {**os.environ, **ENV, "RELAYFLOW_TENANTS": tenants_policy(args)}
        stack = Stack(
            ports=Ports(args.base_port), state_dir=Path(tmp), base_env=env, sweep_interval_s=5.0
        )
        print(f"starting a local stack (tenants {tenants_policy(args)}) …", flush=True)
        stack.up()
        try:
            print(f"  B alone: {args.b_flows} flows", flush=True)
            alone = run_b_alone(stack, args)
            print(f"  A: {args.a_flows} flows, then B: {args.b_flows}", flush=True)
            behind = run_behind_a(stack, args)
        finally:
            stack.down()
    print(report(alone, behind, args))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a-flows", type=int, default=1000)
    parser.add_argument("--b-flows", type=int, default=10)
    parser.add_argument("--a-max-running", type=int, default=50)
    parser.add_argument("--a-starts-per-s", type=float, default=20.0)
    parser.add_argument("--activation-s", type=float, default=5.0)
    parser.add_argument("--base-port", type=int, default=8480)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (1 <= args.a_flows <= 20_000 and 1 <= args.b_flows <= 1000):
        parser.error("1 <= --a-flows <= 20000 and 1 <= --b-flows <= 1000")
    if args.a_max_running < 1 or args.a_starts_per_s < 0 or args.activation_s < 0:
        parser.error("--a-max-running >= 1, --a-starts-per-s >= 0, --activation-s >= 0")
    if args.inner:
        return inner(args)
    env = {**os.environ, **relayflow_env(Ports(args.base_port)), **ENV}
    argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
    return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
