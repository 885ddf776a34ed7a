"""Run N registration flows through a fresh local stack and print throughput, latency and cost.

    python bench/e2e_flows.py [--flows 200] [--base-port 8320] [--timeout-s 600]
                              [--activation-s 2] [--poll-max-interval-s 30] [--record]

``--activation-s``: how long after its creation a registration turns ACTIVE (the client API
emulator's activation delay), which sets how many polls each flow makes; with
``--poll-max-interval-s`` (the poll backoff's cap, RELAYFLOW_POLL_MAX_INTERVAL_S) a run can
make ~3 polls a flow (``--activation-s 2.5``) or ~50 (``--activation-s 92
--poll-max-interval-s 2``). The headline (``writes``) states writes per flow against the
poll-chain target, 4 + polls/10 (a poll that is plainly not ready writes nothing between
its chain's checkpoints: ``relayflow.core.planner.chain``). It counts the writes to flow
documents, read from the operation log every process of the stack keeps for a run with
``--record`` (RELAYFLOW_OPS_LOG, ``relayflow.gcp.recording``; recording costs CPU in every
process, so CPU figures come from runs without it): the other writes, shown apart under
``writes.shared`` with their rate, are the dependency breakers' windows (``breaker_windows``),
which each instance flushes about once a second while it makes calls — per instance-second, not
per flow, so a slow batch of few flows shows several per flow and one at the target rate almost
none. ``per_flow.firestore_writes`` (and the cost) counts every write, both kinds.

Prints flows/s, p50/p95 flow latency (start message published -> flow finished; and the run
time, flow doc created -> finished), and per flow: Firestore
reads and writes, Cloud Tasks tasks created, Pub/Sub messages. Counts come from the services'
own counters (GET /stats on worker and poller), the Cloud Tasks emulator's /stats, and the
batch itself; the start function's Firestore cost is one create per start message by
construction (it has no /stats route: functions-framework owns its HTTP surface).

CPU (``cpu_s_per_flow``): for every component of the stack, the CPU time (utime + stime, and
cutime + cstime of reaped children) of its whole process tree — the PID recorded in the
stack's state file, its descendants by parent PID (gunicorn's worker under its arbiter, the
JVM under the gcloud wrapper) and its process group — read from /proc/<pid>/stat just before
the first publish and again once every flow has ended (bench/cputime.py), divided by the
flows. Grouped as relayflow's own processes (start function, worker, poller, api, sweeper),
the emulators (Pub/Sub, Firestore, Cloud Tasks) and the fake dependencies (client API,
orders API: the external service, not ours). Background work (gunicorn's loop, gRPC threads,
the JVMs' GC, the sweeper's one sweep a minute) counts where it runs, so an idle component
shows what it burns while the batch runs. Good to 10 ms per process per reading.

``cpu_ms_per_request``: start = the start function's CPU ÷ start messages; action = the
worker's CPU ÷ its requests; poll = the poller's CPU ÷ its requests. A poll request is one
committed poll (the flows' ``polls``); the worker's requests are the Cloud Tasks dispatches
that were not polls. Each includes its process's share of background work, so it reads high
when requests are few (a lone flow shows 2 to 3 times the figure of a batch of 200).

``cost_per_million_flows_usd`` (bench/prices.py has the prices and their sources): Cloud Run
CPU and memory on billed instance time, with CPU allocated only during requests, 1 vCPU and
512 MiB per instance, and instance time = Cloud Run CPU (start function, worker, poller, and
the sweeper, which does locally what the worker's POST /sweep does in the cloud) times a
stated factor: ``low`` 1.0 (busy instances: requests overlap, so the one vCPU is never idle
while billed) and ``high`` 5.0 (requests that never overlap, so each is billed for its whole
wall time: on the local stack a lone flow's action and poll requests hold their thread 5 to 8
times the CPU they use, waiting on Firestore, Cloud Tasks and the client API — see
``bench/occupancy.py --plan 5:1`` — and we assume cloud round trips of the same order; the
100 ms rounding of billed time is left out); Cloud Run requests = Cloud Tasks dispatches +
one push per start message; Firestore reads and writes as counted, plus the one TTL delete of
each flow document; Cloud Tasks operations = tasks created + creates answered ALREADY_EXISTS +
push deliveries; Pub/Sub = the start message and the result event, each published once and
delivered once (one subscriber), each in its own request billed at the 1000-byte minimum. The
local machine's CPU stands in for a Cloud Run vCPU; the emulators' CPU costs nothing in the cloud
(the managed services bill per operation) and is shown only to say what it costs locally.
Firestore is priced in ``location``, the one every environment's Terraform creates (``nam5``,
a multi-region: twice a region's price); ``bench/prices.py`` prices other locations, and the
cost at a sustained rate with both Cloud Run billing modes.
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cputime, profile  # noqa: E402
from bench.prices import DEFAULT_LOCATION, FlowUsage, Instance, cost_per_million  # noqa: E402
from relayflow.capacity import oplog  # noqa: E402
from relayflow.gcp.recording import OPS_LOG_ENV  # noqa: E402
from relayflow.local import statefile  # noqa: E402
from relayflow.local.components import EMULATORS, FAKES, SERVICES  # noqa: E402
from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402
from relayflow.topology import load_topology  # noqa: E402

if TYPE_CHECKING:
    from relayflow.cli.batch import BatchReport

# Cloud Run instance time per CPU second of its handlers: the two ends stated in the docstring.
INSTANCE_FACTORS = {"low": 1.0, "high": 5.0}
# What runs on Cloud Run in the cloud: the local sweeper does what the worker's POST /sweep does
# there (Cloud Scheduler calls it); the api serves people, not flows.
CLOUD_RUN = ("start_function", "worker", "poller", "sweeper")
SETTLE_S = 1.0  # the last handler returns after its result event is out
OPS_LOG = "ops.jsonl"  # in the stack's state directory: every process's operations
FLOWS_COLLECTION = load_topology().firestore.flows_collection


def _get(url: str) -> dict[str, Any]:
    response = requests.get(url, timeout=10)
    response.raise_for_status()
    return dict(response.json())


def service_counters(ports: Ports) -> dict[str, int]:
    """The worker's and poller's counters (GET /stats), summed, and the Cloud Tasks
    emulator's tasks created and dispatched (``ct_created``, ``ct_dispatched``)."""
    total: dict[str, int] = {}
    for port in (ports.worker, ports.poller):
        for name, value in _get(f"http://{HOST}:{port}/stats")["counters"].items():
            total[name] = total.get(name, 0) + int(value)
    tasks = _get(f"http://{HOST}:{ports.cloud_tasks_rest}/stats")
    total["ct_created"] = int(tasks["created"])
    total["ct_dispatched"] = int(tasks["dispatched"])
    return total


def component_pids(state_dir: Path) -> dict[str, int]:
    """Each running component's recorded PID (its process-group id), from the state file."""
    state = statefile.load(state_dir / "state.json")
    if state is None:
        raise SystemExit(f"no running stack recorded in {state_dir}")
    return {record.name: record.pid for record in state.processes}


def cpu_per_flow(cpu_s: dict[str, float], flows: int) -> dict[str, dict[str, float]]:
    """CPU seconds per flow by component, in groups, each with its total."""
    groups = {"relayflow": SERVICES, "emulators": EMULATORS, "fakes": FAKES}
    result: dict[str, dict[str, float]] = {}
    for group, names in groups.items():
        per = {name: round(cpu_s[name] / flows, 4) for name in names if name in cpu_s}
        per["total"] = round(cputime.total(cpu_s, names) / flows, 4)
        result[group] = per
    return result


def cpu_per_request(
    cpu_s: dict[str, float], starts: int, actions: int, polls: int
) -> dict[str, float]:
    """Milliseconds of CPU per start message, action request and poll request."""

    def ms(name: str, requests_: int) -> float:
        return round(cpu_s.get(name, 0.0) / max(requests_, 1) * 1000, 2)

    return {
        "start": ms("start_function", starts),
        "action": ms("worker", actions),
        "poll": ms("poller", polls),
    }


def costs(usage: FlowUsage) -> dict[str, Any]:
    """Cost per million flows at each stated instance-time factor, Firestore in the default
    location."""
    result: dict[str, Any] = {"location": DEFAULT_LOCATION}
    for name, factor in INSTANCE_FACTORS.items():
        instance = Instance(instance_s_per_cpu_s=factor)
        result[name] = cost_per_million(usage, instance, DEFAULT_LOCATION)
    result["assumptions"] = {
        "instance": "1 vCPU, 512 MiB, CPU allocated only during requests",
        "instance_s_per_cpu_s": INSTANCE_FACTORS,
        "usage_per_flow": {k: round(v, 4) for k, v in vars(usage).items()},
    }
    return result


@dataclass(frozen=True)
class Batch:
    """What a batch did: the report, the counters' increase, each component's CPU seconds."""

    report: BatchReport
    delta: dict[str, int]
    cpu_s: dict[str, float]
    # Firestore writes the stack's processes made during the batch, per collection.
    writes_by_collection: dict[str, int]


def run(
    flows: int, timeout_s: float, ports: Ports, state_dir: Path, profile_dir: Path | None = None
) -> Batch:
    """Publish ``flows`` registration flows, wait for them to end, measure around them."""
    from google.cloud.pubsub_v1 import SubscriberClient

    from relayflow.cli.batch import Planned, ResultWatcher, run_batch
    from relayflow.gcp.events import Events, build_publisher
    from relayflow.gcp.store import FlowStore, build_client
    from relayflow.settings import load_settings

    settings = load_settings()
    run_id = uuid.uuid4().hex[:6]
    planned = [
        Planned(
            flow_id=f"bench-{run_id}-{i:05d}",
            body={
                "flow": "registration",
                "flow_id": f"bench-{run_id}-{i:05d}",
                "input": {"resource": f"bench-{run_id}-{i}"},
            },
        )
        for i in range(flows)
    ]
    store = FlowStore(build_client(settings))
    watcher = ResultWatcher(SubscriberClient(), settings.project_id, "flow-results")
    pids = component_pids(state_dir)
    recordings = profile.attach(pids, profile_dir) if profile_dir else []
    before, cpu_before = service_counters(ports), cputime.cpu_seconds(pids)
    started = time.time()
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
        profile.detach(recordings)
    time.sleep(SETTLE_S)
    cpu_s = cputime.delta(cpu_before, cputime.cpu_seconds(pids))
    after = service_counters(ports)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    writes = writes_by_collection(state_dir / OPS_LOG, started, time.time())
    return Batch(report=report, delta=delta, cpu_s=cpu_s, writes_by_collection=writes)


def writes_by_collection(log: Path, start: float, end: float) -> dict[str, int]:
    """The Firestore writes the operation log at ``log`` records in [start, end), per
    collection (none when the run kept no log: ``--record``)."""
    counts: dict[str, int] = {}
    if not log.exists():
        return counts
    for op in oplog.between(oplog.read(log), start, end):
        if op.op == oplog.FS_WRITE:
            collection = str(op.get("coll", ""))
            counts[collection] = counts.get(collection, 0) + 1
    return counts


def usage_per_flow(batch: Batch, flows: int) -> FlowUsage:
    """What one flow used of each billed resource, as the docstring counts it."""
    n = max(len(batch.report.records), 1)
    delta = batch.delta
    dispatched = delta["ct_dispatched"]
    tasks_ops = delta["ct_created"] + delta.get("tasks_deduplicated", 0) + dispatched
    published = flows + delta.get("messages_published", 0)
    return FlowUsage(
        cloud_run_cpu_s=cputime.total(batch.cpu_s, CLOUD_RUN) / n,
        cloud_run_requests=(dispatched + flows) / n,
        firestore_reads=delta.get("firestore_reads", 0) / n,
        # The start function: one create (write) per start message.
        firestore_writes=(delta.get("firestore_writes", 0) + flows) / n,
        firestore_deletes=1.0,  # the TTL delete of the flow document
        tasks_operations=tasks_ops / n,
        pubsub_requests=2 * published / n,
    )


def set_activation_delay(ports: Ports, delay_s: float) -> None:
    """The client API emulator's activation delay for registrations created from now on."""
    url = f"http://{HOST}:{ports.client_api}/admin/config"
    requests.post(url, json={"activation_delay_s": delay_s}, timeout=10).raise_for_status()


def writes_headline(batch: Batch, polls_per_flow: float) -> dict[str, Any]:
    """Writes to flow documents per flow against the poll-chain target, 4 + polls/10, and
    the other writes apart, per flow and per second (see the docstring)."""
    n = max(len(batch.report.records), 1)
    target = 4 + polls_per_flow / 10
    if not batch.writes_by_collection:
        return {"recorded": False, "note": "run with --record for writes per flow document"}
    flow_writes = batch.writes_by_collection.get(FLOWS_COLLECTION, 0) / n
    elapsed = max(batch.report.elapsed_s, 1e-9)
    shared = {
        name: {"per_flow": round(count / n, 2), "per_s": round(count / elapsed, 2)}
        for name, count in sorted(batch.writes_by_collection.items())
        if name != FLOWS_COLLECTION
    }
    return {
        "writes_per_flow": round(flow_writes, 2),
        "polls_per_flow": round(polls_per_flow, 2),
        "target_writes_per_flow": round(target, 2),
        "met": flow_writes <= target,
        "shared": shared,
    }


def summary(batch: Batch, flows: int) -> dict[str, Any]:
    """The printed figures."""
    from relayflow.cli.batch import percentile

    report, delta = batch.report, batch.delta
    n = max(len(report.records), 1)
    durations, latencies = report.durations_s(), report.latencies_s()
    polls = sum(r.polls for r in report.records)
    usage = usage_per_flow(batch, flows)
    return {
        "flows": flows,
        "statuses": report.by_status(),
        "wall_s": round(report.elapsed_s, 2),
        "flows_per_s": round(len(report.records) / report.elapsed_s, 2)
        if report.elapsed_s
        else 0.0,
        # publish -> terminal, what a publisher waits; and doc created -> terminal.
        "latency_p50_s": round(percentile(latencies, 50), 3),
        "latency_p95_s": round(percentile(latencies, 95), 3),
        "run_time_p50_s": round(percentile(durations, 50), 3),
        "run_time_p95_s": round(percentile(durations, 95), 3),
        "polls_per_flow": round(polls / n, 2),
        "writes": writes_headline(batch, polls / n),
        "per_flow": {
            "firestore_reads": round(usage.firestore_reads, 2),
            "firestore_writes": round(usage.firestore_writes, 2),
            "tasks_created": round(delta["ct_created"] / n, 2),
            "tasks_dispatched": round(delta["ct_dispatched"] / n, 2),
            "pubsub_messages": round(usage.pubsub_requests / 2, 2),
            "cloud_run_requests": round(usage.cloud_run_requests, 2),
        },
        "cpu_s_per_flow": cpu_per_flow(batch.cpu_s, n),
        "cpu_ms_per_request": cpu_per_request(
            batch.cpu_s, flows, delta["ct_dispatched"] - polls, polls
        ),
        "cost_per_million_flows_usd": costs(usage),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


def own_cpu_per_request(cpu_ms: dict[str, float], profile_dir: Path) -> dict[str, float]:
    """CPU per request less the share the profile puts under the handler's call (the
    external API) and, for a poll, under an action run inline after it: relayflow's own part
    of each request, as the lean-handler targets count it."""
    outside = {
        "start": profile.share(profile_dir / "start_function.txt", (profile.HANDLER,)),
        "action": profile.share(profile_dir / "worker.txt", (profile.HANDLER,)),
        "poll": profile.share(profile_dir / "poller.txt", (profile.HANDLER, profile.INLINE)),
    }
    return {name: round(cpu_ms[name] * (1 - outside[name]), 2) for name in outside}


def measure(
    flows: int,
    timeout_s: float,
    base_port: int,
    state_dir: Path,
    profile_dir: Path | None,
    activation_s: float | None = None,
) -> int:
    """Runs inside the stack's environment (a child process), so the clients find it."""
    if activation_s is not None:
        set_activation_delay(Ports(base_port), activation_s)
    batch = run(flows, timeout_s, Ports(base_port), state_dir, profile_dir)
    lines = summary(batch, flows)
    if profile_dir is not None:
        lines["cpu_ms_per_request_own"] = own_cpu_per_request(
            lines["cpu_ms_per_request"], profile_dir
        )
    print(json.dumps(lines, indent=2))
    return 0 if lines["statuses"].get("SUCCEEDED", 0) == flows else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", type=int, default=200)
    parser.add_argument("--base-port", type=int, default=8320)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample the start function, worker and poller with py-spy into DIR "
        "(then: python bench/profile.py DIR); the CPU figures then include py-spy's overhead",
    )
    parser.add_argument(
        "--activation-s",
        type=float,
        help="the client API emulator's activation delay (default: the emulator's, 2 s)",
    )
    parser.add_argument(
        "--poll-max-interval-s",
        type=float,
        help="the poll backoff's cap for this stack (RELAYFLOW_POLL_MAX_INTERVAL_S)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="keep every process's operation log (RELAYFLOW_OPS_LOG): the headline's writes per "
        "flow document and the shared writes apart. Recording costs CPU in every process, so "
        "the CPU figures of a recorded run read high: take them from a run without it",
    )
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.flows <= 100_000:
        parser.error("--flows must be in 1..100000")
    if args.activation_s is not None and args.activation_s < 0:
        parser.error("--activation-s must be >= 0")
    if args.poll_max_interval_s is not None and args.poll_max_interval_s <= 0:
        parser.error("--poll-max-interval-s must be > 0")
    if args.measure:
        profile_dir = args.profile.resolve() if args.profile else None
        state = Path(args.state_dir)
        return measure(
            args.flows, args.timeout_s, args.base_port, state, profile_dir, args.activation_s
        )
    env = dict(os.environ)
    if args.poll_max_interval_s is not None:
        env["RELAYFLOW_POLL_MAX_INTERVAL_S"] = str(args.poll_max_interval_s)
    with tempfile.TemporaryDirectory(prefix="relayflow-bench-") as state_dir:
        if args.record:
            env[OPS_LOG_ENV] = str(Path(state_dir) / OPS_LOG)
        stack = Stack(ports=Ports(args.base_port), state_dir=Path(state_dir), base_env=env)
        print(f"starting a local stack on base port {args.base_port} …", flush=True)
        stack.up()
        try:
            argv = [sys.executable, __file__, "--measure", "--state-dir", state_dir]
            argv += sys.argv[1:]
            if args.profile:  # the child runs in the repo: the directory as the caller meant it
                argv += ["--profile", str(args.profile.resolve())]
            env = {**os.environ, **stack.env()}
            return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
        finally:
            stack.down()


if __name__ == "__main__":
    sys.exit(main())
