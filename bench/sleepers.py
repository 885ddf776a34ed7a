"""N flows asleep on a fresh local stack: the Cloud Tasks tasks each holds, and the CPU
relayflow spends while they sleep.

    python bench/sleepers.py [--flows 10000] [--sleep-s 86400] [--quiet-s 60] [--base-port 8620]

Each flow (bench/sleep_app.py) sleeps ``--sleep-s`` (a day by default: none wakes during the
bench), then does one action. The bench publishes the N start messages, waits until every flow
is asleep (its wake time fixed: position ``nap`` sleep hop 1), then reads the Cloud Tasks
emulator's GET /stats (tasks queued and in flight, so held per flow) and the CPU time of
relayflow's own processes (the start function, worker, poller, api and sweeper, with its
one-a-minute sweep: bench/cputime.py) over a quiet window of ``--quiet-s`` seconds. Expected:
one task per flow, and no CPU but the sweeper's periodic query and the services' idle ticks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from bench import cputime  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.names import SERVICES  # noqa: E402
from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

APP = "sleep_app:registry"
PROJECT = "relayflow-local"


def tasks_stats(ports: Ports) -> dict[str, Any]:
    import requests

    response = requests.get(f"http://{HOST}:{ports.cloud_tasks_rest}/stats", timeout=30)
    response.raise_for_status()
    return dict(response.json())


def publish_all(flows: int, sleep_s: float, run: str) -> list[str]:
    """Publish ``flows`` start messages, batched by the client; their flow ids."""
    from relayflow.gcp.events import Events, build_publisher

    events = Events(build_publisher(), project=PROJECT)
    ids = [f"sleep-{run}-{i:05d}" for i in range(flows)]
    futures = [
        events.submit(
            "flow-requests",
            json.dumps(
                {"flow": "sleeper", "flow_id": flow_id, "input": {"seconds": sleep_s}}
            ).encode(),
        )
        for flow_id in ids
    ]
    for future in futures:
        future.result(timeout=120)
    return ids


def asleep(db: Any) -> int:
    """How many flows have their wake time fixed and wait for it (hop 1 of ``nap``)."""
    from google.cloud.firestore_v1.base_query import FieldFilter

    query = (
        db.collection("flows")
        .where(filter=FieldFilter("position.kind", "==", "sleep"))
        .where(filter=FieldFilter("position.poll", "==", 1))
    )
    (result,) = query.count().get()
    return int(result[0].value)


def wait_asleep(db: Any, flows: int, timeout_s: float) -> float:
    """Seconds until all ``flows`` are asleep (SystemExit if they are not within the timeout)."""
    began = time.monotonic()
    shown = -1
    while time.monotonic() - began < timeout_s:
        count = asleep(db)
        if count != shown:
            print(f"    {count}/{flows} asleep after {time.monotonic() - began:.0f}s", flush=True)
            shown = count
        if count >= flows:
            return time.monotonic() - began
        time.sleep(2.0)  # a bench watching from outside, not a handler
    raise SystemExit(f"only {shown}/{flows} flows asleep after {timeout_s:.0f}s")


def run(
    flows: int, sleep_s: float, quiet_s: float, base_port: int, timeout_s: float
) -> dict[str, Any]:
    from google.cloud import firestore

    with tempfile.TemporaryDirectory(prefix="relayflow-sleepers-") as state:
        path = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH", "")) if p)
        stack = Stack(
            ports=Ports(base_port),
            state_dir=Path(state),
            app=APP,
            app_path=BENCH,
            base_env={**os.environ, "PYTHONPATH": path},
        )
        stack.up()
        try:
            db = firestore.Client(project=PROJECT)
            began = time.monotonic()
            publish_all(flows, sleep_s, uuid.uuid4().hex[:6])
            published_s = time.monotonic() - began
            asleep_s = wait_asleep(db, flows, timeout_s)
            time.sleep(5.0)  # the last commits' enqueues and responses settle
            recorded = stack.running()
            assert recorded is not None
            pids = {p.name: p.pid for p in recorded.processes if p.name in SERVICES}
            tasks_before = tasks_stats(stack.ports)
            cpu_before = cputime.cpu_seconds(pids)
            time.sleep(quiet_s)  # the quiet window: the flows sleep, relayflow should idle
            cpu = cputime.delta(cpu_before, cputime.cpu_seconds(pids))
            tasks_after = tasks_stats(stack.ports)
            still_asleep = asleep(db)
        finally:
            stack.down()
    held = int(tasks_after["queued"]) + int(tasks_after["in_flight"])
    return {
        "flows": flows,
        "sleep_s": sleep_s,
        "published_s": round(published_s, 1),
        "all_asleep_after_s": round(published_s + asleep_s, 1),
        "tasks_held": held,
        "tasks_held_per_flow": round(held / flows, 3),
        "tasks_created_per_flow": round(int(tasks_after["created"]) / flows, 3),
        "tasks_dispatched_in_quiet_window": int(tasks_after["dispatched"])
        - int(tasks_before["dispatched"]),
        "still_asleep": still_asleep,
        "quiet_window_s": quiet_s,
        "relayflow_cpu_s_in_window": {k: round(v, 2) for k, v in sorted(cpu.items())},
        "relayflow_cpu_s_total": round(sum(cpu.values()), 2),
        "relayflow_cpu_share_of_one_core": round(sum(cpu.values()) / quiet_s, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", type=int, default=10_000)
    parser.add_argument("--sleep-s", type=float, default=86_400.0)
    parser.add_argument("--quiet-s", type=float, default=60.0)
    parser.add_argument("--base-port", type=int, default=8620)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.flows <= 100_000 or args.sleep_s <= 0 or args.quiet_s <= 0:
        parser.error("need 1 <= --flows <= 100000, --sleep-s > 0 and --quiet-s > 0")
    if not args.inner:
        env = {**os.environ, **relayflow_env(Ports(args.base_port), app=APP)}
        argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
        return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
    result = run(args.flows, args.sleep_s, args.quiet_s, args.base_port, args.timeout_s)
    print(json.dumps(result, indent=2))
    return 0 if result["tasks_held"] == args.flows == result["still_asleep"] else 1


if __name__ == "__main__":
    sys.exit(main())
