"""The capacity model fed by real runs: the load R flows/s put on every limited cloud resource.

    python bench/capacity.py [--rate 10000] [--flows 100] [--base-port 8720]
        [--shapes reference,dag,foreach,callback] [--mix reference] [--env prod] [--json PATH]

Starts a fresh local stack with every relayflow process recording its operations
(``RELAYFLOW_OPS_LOG``, relayflow.gcp.recording), runs ``--flows`` flows of each shape one shape
after another — reference (the registration flow of bench/e2e_flows.py), dag (a parallel DAG),
foreach (a ForEach of five actions), callback (the fleet flow: a ForEach of callback steps with
a safety-net poll) — and measures each shape's CPU per Cloud Run service (bench/cputime.py) over
its own window. Then it reads the index configuration from the Terraform (infra/terraform, env
``--env``) and topology.json (queue shards and rates, Firestore shards) and prints, for R flows/s
of the ``--mix`` (``reference=3,dag=1``: shares), each resource's load, its published limit
(relayflow/capacity/limits.py names the sources), its use and headroom, and its ceiling (the R
at which it saturates); the overall ceiling; whether every resource stays <= 70 % at R; and the
Cloud Run sizing that R implies. Before the table: each shape's operations per flow, and the
hotspot rules' findings on the configuration (tests/infra/test_hotspots.py fails on them).

The start messages are published by this script, as a caller would; they are recorded as
component ``caller`` (the start message counts against the Pub/Sub quota too). There is no
sweeper (it sweeps once a minute whatever the rate).
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
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cputime  # noqa: E402
from relayflow.capacity import oplog, sizing  # noqa: E402
from relayflow.capacity.deployment import Deployment  # noqa: E402
from relayflow.capacity.model import ShapeRun, parse_mix, requests_of  # noqa: E402
from relayflow.capacity.report import answer, hotspots, render  # noqa: E402
from relayflow.capacity.terraform import read_deployment  # noqa: E402
from relayflow.gcp import recording  # noqa: E402
from relayflow.local import statefile  # noqa: E402
from relayflow.local.ports import Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

APP = "bench.capacity_app:build_registry"
SETTLE_S = 1.0  # the last handler returns after its result event is out
FLEET_SIZE = 3
# The stack's components (bench/cputime.py names) as the Terraform names their services.
CLOUD_RUN = {"start_function": "start-flow", "worker": "worker", "poller": "poller", "api": "api"}


def body_of(shape: str, flow_id: str) -> dict[str, Any]:
    """The start message of one flow of ``shape``."""
    if shape == "reference":
        return {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    if shape == "dag":
        return {"flow": "capacity_dag", "flow_id": flow_id, "input": {"n": 1}}
    if shape == "foreach":
        return {"flow": "capacity_each", "flow_id": flow_id, "input": {"items": 5}}
    resources = [f"{flow_id}-{k}" for k in range(FLEET_SIZE)]
    return {"flow": "fleet", "flow_id": flow_id, "input": {"resources": resources}}


SHAPES = ("reference", "dag", "foreach", "callback")


def run_shape(
    shape: str, flows: int, log: Path, pids: dict[str, int], timeout_s: float
) -> ShapeRun:
    """Run ``flows`` flows of ``shape``; its operations and CPU from its own time window."""
    from google.cloud.pubsub_v1 import SubscriberClient

    from relayflow.cli.batch import Planned, ResultWatcher, run_batch
    from relayflow.gcp.events import Events, build_publisher
    from relayflow.gcp.store import FlowStore, build_client
    from relayflow.settings import load_settings

    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    # Sequential ids, as callers choose them (order-000123): what the key-range rule looks at.
    planned = [
        Planned(
            flow_id=f"{shape}-{run_id}-{i:05d}", body=body_of(shape, f"{shape}-{run_id}-{i:05d}")
        )
        for i in range(flows)
    ]
    caller = recording.publisher(build_publisher(), recording.Recorder(str(log), "caller"))
    watcher = ResultWatcher(SubscriberClient(), settings.project_id, "flow-results")
    start, cpu_before = time.time(), cputime.cpu_seconds(pids)
    try:
        report = run_batch(
            planned,
            events=Events(caller, project=settings.project_id),
            store=FlowStore(build_client(settings)),
            watcher=watcher,
            topic="flow-requests",
            timeout_s=timeout_s,
            progress=lambda done, total, t: print(
                f"  {shape}: {done}/{total} ended  {t:6.1f}s", flush=True
            ),
        )
    finally:
        watcher.close()
    time.sleep(SETTLE_S)
    cpu = cputime.delta(cpu_before, cputime.cpu_seconds(pids))
    end = time.time()
    statuses = report.by_status()
    print(f"  {shape}: {statuses} in {report.elapsed_s:.1f}s", flush=True)
    ops = oplog.between(oplog.read(log), start, end)
    cpu_s = {service: cpu.get(name, 0.0) for name, service in CLOUD_RUN.items()}
    return ShapeRun(shape, flows, ops, cpu_s)


def shape_summary(run: ShapeRun, deployment: Deployment) -> dict[str, Any]:
    """What one flow of the shape did: operations per flow by kind, CPU per service."""
    n = run.flows
    writes = Counter(op.get("coll") for op in oplog.of_kind(run.ops, oplog.FS_WRITE))
    reads = Counter()  # type: Counter[str]
    for op in oplog.of_kind(run.ops, oplog.FS_READ):
        reads[op.get("coll")] += max(1, int(op.get("n", 1)))
    tasks = Counter()  # type: Counter[str]
    for op in oplog.of_kind(run.ops, oplog.TASK_CREATE):
        kind = deployment.queue_kind(op.get("queue"))
        tasks[f"{kind.kind if kind else op.get('queue')}:{op.get('outcome')}"] += 1
    topics = Counter(op.get("topic") for op in oplog.of_kind(run.ops, oplog.PUBLISH))
    per = lambda c: {k: round(v / n, 2) for k, v in sorted(c.items())}  # noqa: E731
    return {
        "flows": n,
        "firestore_writes": per(writes),
        "firestore_reads": per(reads),
        "tasks": per(tasks),
        "publishes": per(topics),
        "cloud_run_requests": {k: round(v, 2) for k, v in requests_of(run, deployment).items()},
        "cpu_ms": {k: round(v / n * 1000, 1) for k, v in run.cpu_s.items()},
    }


def measure(args: argparse.Namespace, stack: Stack, log: Path) -> dict[str, ShapeRun]:
    os.environ.update(stack.env())  # this process is the stack's client
    state = statefile.load(stack.state_file)
    assert state is not None, "the stack recorded no processes"
    pids = {record.name: record.pid for record in state.processes}
    return {shape: run_shape(shape, args.flows, log, pids, args.timeout_s) for shape in args.shapes}


def report(
    runs: dict[str, ShapeRun],
    deployment: Deployment,
    args: argparse.Namespace,
    out: Callable[[str], None] = print,
) -> dict[str, Any]:
    summaries = {shape: shape_summary(run, deployment) for shape, run in runs.items()}
    out("\nper flow of each shape (from the recorded operations):")
    out(json.dumps(summaries, indent=2))
    found = hotspots(deployment)
    out(f"\nhotspot rules on the configuration: {len(found)} finding(s)")
    for line in found:
        out(f"  {line}")
    result = answer(runs, args.mix, deployment, args.rate)
    out("")
    out(render(result, args.mix))
    return {
        "shapes": summaries,
        "hotspots": found,
        "rate": args.rate,
        "ceiling": result.ceiling,
        "first": result.first.usage.key if result.first else None,
        "within_target": result.within_target,
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10_000.0, help="target flows/s")
    parser.add_argument("--flows", type=int, default=100, help="flows of each shape")
    parser.add_argument("--base-port", type=int, default=8720)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--mix", default="reference", help="shape=weight,... (default: reference)")
    parser.add_argument("--env", default="prod", help="infra/terraform/envs/ENV")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--ops-log", type=Path, help="keep the operations log here")
    parser.add_argument("--save-runs", type=Path, help="keep each shape's run (ops, CPU) here")
    parser.add_argument(
        "--save-profile",
        action="store_true",
        help="write the mix's per-flow figures to infra/terraform/sizing.json and regenerate "
        "every environment's sizing.tf (make sizing)",
    )
    parser.add_argument(
        "--replay",
        type=Path,
        help="no stack: the model on runs --save-runs kept (another --rate, --mix or --env)",
    )
    args = parser.parse_args()
    if not 1 <= args.flows <= 100_000:
        parser.error("--flows must be in 1..100000")
    if not args.rate > 0:
        parser.error("--rate must be > 0")
    args.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = sorted(set(args.shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    try:
        args.mix = parse_mix(args.mix)
    except ValueError as exc:
        parser.error(str(exc))
    if set(args.mix) - set(args.shapes):
        parser.error(f"--mix names shapes not run: {sorted(set(args.mix) - set(args.shapes))}")
    return args


def save_runs(runs: dict[str, ShapeRun], path: Path) -> None:
    data = {
        shape: {
            "flows": run.flows,
            "cpu_s": dict(run.cpu_s),
            "ops": [{"op": o.op, "c": o.component, "t": o.t, "m": o.m, **o.data} for o in run.ops],
        }
        for shape, run in runs.items()
    }
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")


def load_runs(path: Path) -> dict[str, ShapeRun]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        shape: ShapeRun(
            shape,
            int(run["flows"]),
            oplog.parse((json.dumps(op) for op in run["ops"]), str(path)),
            {k: float(v) for k, v in run["cpu_s"].items()},
        )
        for shape, run in data.items()
    }


def save_profile(
    runs: dict[str, ShapeRun], deployment: Deployment, args: argparse.Namespace, what: str
) -> None:
    """Keep the mix's per-flow figures in infra/terraform/sizing.json (the environments'
    targets stay as they are) and regenerate every environment's sizing.tf from them."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    measured = f"{time.strftime('%Y-%m-%d')} on {head or 'an unknown commit'}, {what}"
    current = sizing.SizingFile.read(REPO)
    profile = sizing.profile_of(runs, args.mix, deployment, measured)
    sizing.SizingFile(profile, current.targets).write(REPO)
    for line in sizing.regenerate(REPO) or ["every environment's sizing.tf already matched"]:
        print(line)


def main() -> int:
    args = arguments()
    deployment = read_deployment(REPO, args.env)  # a configuration it cannot read fails first
    if args.replay:
        runs = load_runs(args.replay)
        figures = report(runs, deployment, args)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
        if args.save_profile:
            save_profile(runs, deployment, args, f"replay of {args.replay.name}")
        return 0
    with tempfile.TemporaryDirectory(prefix="relayflow-capacity-") as state_dir:
        log = args.ops_log.resolve() if args.ops_log else Path(state_dir) / "ops.jsonl"
        log.unlink(missing_ok=True)
        env = {**os.environ, recording.OPS_LOG_ENV: str(log), "PYTHONPATH": str(REPO)}
        stack = Stack(
            ports=Ports(args.base_port),
            state_dir=Path(state_dir) / "stack",
            app=APP,
            app_path=REPO,
            sweep_interval_s=0,
            base_env=env,
        )
        print(f"starting a local stack on base port {args.base_port} …", flush=True)
        stack.up()
        try:
            runs = measure(args, stack, log)
        finally:
            stack.down()
    if args.save_runs:
        save_runs(runs, args.save_runs)
    figures = report(runs, deployment, args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n", encoding="utf-8")
    if args.save_profile:
        save_profile(runs, deployment, args, f"{args.flows} flows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
