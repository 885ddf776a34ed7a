"""The seed design's sleeping poller and relayflow side by side: throughput, flow time, occupancy.

    python bench/occupancy.py [--plan 5:192,20:96] [--base-port 8620] [--timeout-s 900]

Both run the same job against the same fake client API (``relayflow/emulators/client_api``)
of one local stack this bench starts (and stops, by PID) on its own base port: register a
resource with an Idempotency-Key, poll ``GET /registrations/{id}`` until it is ACTIVE, then
``POST /entities``.
For each activation delay of the plan (``POST /admin/config {"activation_delay_s": d}``, after
``/admin/reset``) each design runs the plan's number of jobs, one design after the other:

sleeping  The seed design (seeds/000, "worker registers, then sleeps and polls in a loop"): a
          pool of 16 threads, as many as one relayflow service process has (the stack runs
          gunicorn with ``--threads 16``). Each thread takes a job and keeps it to the end,
          sleeping between polls on relayflow's own schedule: the reference flow's PollPolicy,
          built from the same settings, so ``compute_delay`` with the same initial interval,
          multiplier, cap and ±20 % jitter; poll 0 at once, poll n+1 after ``delay_s(n)``.
relayflow The reference ``registration`` flow: the N start messages are published to
          ``flow-requests`` at once and the batch ends when every flow's result event is in.

Figures, per design and delay:

flows/s      N ÷ wall time; wall time runs from the moment the first job is handed over (the
             pool's submit, relayflow's first publish) to the moment the last one ended. A
             batch pays for filling the pipeline once, so relayflow's figure grows with N
             towards what its CPU allows; the pool's stays at 16 ÷ flow time. N is a multiple
             of 16 so the pool's last round is full.
run p50/p95  a flow's own run time: for the pool, a thread took the job -> the entity is
             made; for relayflow, the flow document's ``created_at`` -> ``finished_at``.
e2e p50/p95  handed over -> ended: the pool's submit (so it includes waiting for a free
             thread); relayflow's publish acknowledged -> ``finished_at``.
held occ.    handler-held thread seconds ÷ flow-seconds (the sum of the run times). For the
             pool a thread is held from taking a job to its end, so this is 100 % by
             construction: that is the design. For relayflow it is the summed duration of
             every request its worker and poller served during the batch — gunicorn's own
             per-request timing (``%(D)s``, request parsed -> response written: the time a
             gunicorn thread is held), taken from the access log this bench turns on for the
             stack it starts (``GUNICORN_CMD_ARGS``; relayflow's code is unchanged). It counts
             what a request waits on (Firestore, Cloud Tasks, the client API) as held, as the
             pool's sleeps are; it leaves out the start function (the pool's equivalent, taking
             a job off an in-process queue, costs it nothing) and the local sweeper (its own
             process, once a minute).
CPU occ.     CPU seconds ÷ flow-seconds. For the pool, the CPU time of its threads while they
             run jobs (``time.thread_time`` around each job); for relayflow, the CPU time of
             the worker's and the poller's process trees (gunicorn arbiter and worker, from
             /proc/<pid>/stat: bench/cputime.py) between the first publish and the last end,
             background threads included.
ratio        relayflow ÷ sleeping for each figure.

Held and CPU occupancy bracket what relayflow holds. A held request also waits for a CPU: a
batch arrives all at once, on 2 cores that the handlers share with the emulators and the
bench, so a request that computes for ~10 ms can hold its thread for hundreds. On Cloud Run,
where instances scale out, it would wait less; held occupancy is the upper bound and CPU
occupancy the lower. (A lone flow, ``--plan 5:1,20:1``, holds about 4.5 % and 1 %.) Under the
table, relayflow's requests per flow and, per request, the mean held time and CPU of each
service (process CPU ÷ requests, background work included).

The machine is shared: the load average before and after is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cputime  # noqa: E402
from relayflow import PollPolicy  # noqa: E402
from relayflow.cli.batch import percentile  # noqa: E402
from relayflow.local import statefile  # noqa: E402
from relayflow.local.ports import Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402
from relayflow.settings import Settings  # noqa: E402

THREADS = 16  # the local stack's gunicorn: --workers 1 --threads 16
DEFAULT_PLAN = "5:192,20:96"
HANDLERS = ("worker", "poller")
ACCESS_TAG = "rfbench-access"
# gunicorn reads extra command-line settings from GUNICORN_CMD_ARGS; %(D)s is the request's
# time in microseconds. (functions-framework builds its own gunicorn config and ignores it.)
GUNICORN_ACCESS_LOG = (
    f'--access-logfile - --access-logformat "{ACCESS_TAG} %(m)s %(U)s %(s)s %(D)s"'
)
_ACCESS_LINE = re.compile(rf"^{ACCESS_TAG} (\S+) (\S+) (\d+) (\d+)$", re.MULTILINE)
SETTLE_S = 1.0  # lets the last access-log lines reach the log files


@dataclass(frozen=True)
class Service:
    """What one relayflow service did during a batch: requests, their held time, its CPU."""

    requests: int
    held_s: float
    cpu_s: float


@dataclass(frozen=True)
class Side:
    """One design's run at one activation delay."""

    design: str
    delay_s: float
    flows: int
    ok: int
    wall_s: float
    run_times_s: list[float]
    latencies_s: list[float]
    polls: int
    held_s: float
    cpu_s: float
    services: dict[str, Service] = field(default_factory=dict)  # relayflow's handlers

    @property
    def flows_per_s(self) -> float:
        return self.flows / self.wall_s if self.wall_s else 0.0

    @property
    def flow_seconds(self) -> float:
        return sum(self.run_times_s)

    @property
    def held_occupancy(self) -> float:
        return self.held_s / self.flow_seconds if self.flow_seconds else 0.0

    @property
    def cpu_occupancy(self) -> float:
        return self.cpu_s / self.flow_seconds if self.flow_seconds else 0.0


# -- the sleeping poller ------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One job's times (time.monotonic) and the CPU its thread spent on it."""

    submitted: float
    started: float
    ended: float
    cpu_s: float
    polls: int
    ok: bool


class SleepingPoller:
    """The seed design's worker: register, then poll and sleep in a loop, then create.

    The thread that takes a job holds it until the job ends, sleeps included.
    """

    def __init__(self, base_url: str, policy: PollPolicy, timeout_s: float = 10.0) -> None:
        self._base = base_url.rstrip("/")
        self._policy = policy
        self._timeout_s = timeout_s
        self._local = threading.local()

    def run(self, resource: str, submitted: float) -> Job:
        started, cpu_started = time.monotonic(), time.thread_time()
        polls, ok = 0, False
        try:
            reg_id = self._call("POST", "/registrations", f"{resource}-register", resource=resource)
            polls, ok = self._await_active(str(reg_id["id"]), key=f"{resource}:await")
            if ok:
                body = {"registration_id": reg_id["id"], "name": f"{resource}-entity"}
                self._call("POST", "/entities", f"{resource}-entity", **body)
        except requests.RequestException as error:
            print(f"  sleeping poller: {resource}: {error}", file=sys.stderr, flush=True)
            ok = False
        cpu_s = time.thread_time() - cpu_started
        return Job(submitted, started, time.monotonic(), cpu_s, polls, ok)

    def _await_active(self, reg_id: str, *, key: str) -> tuple[int, bool]:
        """Poll until ACTIVE, sleeping ``delay_s(n)`` between polls; (polls, active)."""
        deadline = time.monotonic() + self._policy.deadline_s
        for n in range(self._policy.max_polls):
            status = self._call("GET", f"/registrations/{reg_id}")["status"]
            if status != "PENDING":
                return n + 1, status == "ACTIVE"
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return n + 1, False
            time.sleep(min(self._policy.delay_s(n=n, key=key), left_s))
        return self._policy.max_polls, False

    def _call(self, method: str, path: str, key: str | None = None, **body: Any) -> Any:
        headers = {"Idempotency-Key": key} if key else {}
        response = self._session().request(
            method,
            f"{self._base}{path}",
            json=body or None,
            headers=headers,
            timeout=self._timeout_s,
        )
        response.raise_for_status()
        return response.json()

    def _session(self) -> requests.Session:
        # A session per thread: requests does not promise that one is safe to share.
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session


def poll_policy(settings: Settings) -> PollPolicy:
    """The reference flow's poll policy, built as relayflow.apps.registration builds it."""
    return PollPolicy(
        initial_s=settings.poll_initial_s,
        multiplier=settings.poll_multiplier,
        max_interval_s=settings.poll_max_interval_s,
        jitter=settings.poll_jitter,
        max_polls=settings.poll_max_polls,
        deadline_s=settings.poll_deadline_s,
    )


def run_sleeping(client_api_url: str, policy: PollPolicy, delay_s: float, flows: int) -> Side:
    poller = SleepingPoller(client_api_url, policy)
    run = uuid.uuid4().hex[:6]
    with ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="sleeping") as pool:
        begun = time.monotonic()
        futures = [pool.submit(poller.run, f"sleep-{run}-{i}", begun) for i in range(flows)]
        jobs = [future.result() for future in futures]
    return Side(
        design="sleeping",
        delay_s=delay_s,
        flows=flows,
        ok=sum(job.ok for job in jobs),
        wall_s=max(job.ended for job in jobs) - begun,
        run_times_s=[job.ended - job.started for job in jobs],
        latencies_s=[job.ended - job.submitted for job in jobs],
        polls=sum(job.polls for job in jobs),
        held_s=sum(job.ended - job.started for job in jobs),
        cpu_s=sum(job.cpu_s for job in jobs),
    )


# -- relayflow -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Handlers:
    """Where to read what relayflow's worker and poller did: their PIDs and log files."""

    pids: dict[str, int]
    logs: dict[str, Path]

    @classmethod
    def of(cls, state_file: Path) -> Handlers:
        state = statefile.load(state_file)
        if state is None:
            raise SystemExit(f"no running stack recorded in {state_file}")
        records = {record.name: record for record in state.processes}
        return cls(
            pids={name: records[name].pid for name in HANDLERS},
            logs={name: Path(records[name].log) for name in HANDLERS},
        )

    def log_sizes(self) -> dict[str, int]:
        return {name: path.stat().st_size for name, path in self.logs.items()}

    def requests(self, since: Mapping[str, int]) -> dict[str, tuple[int, float]]:
        """Per service: requests served since the given log offsets, and their seconds."""
        return {
            name: request_times(_read_from(path, since[name])) for name, path in self.logs.items()
        }


def request_times(log_text: str) -> tuple[int, float]:
    """How many of the bench's access-log lines a log holds, and their summed ``%(D)s`` (s)."""
    micros = [int(match.group(4)) for match in _ACCESS_LINE.finditer(log_text)]
    return len(micros), sum(micros) / 1e6


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode("utf-8", errors="replace")


def run_relayflow(handlers: Handlers, delay_s: float, flows: int, timeout_s: float) -> Side:
    from google.cloud.pubsub_v1 import SubscriberClient

    from relayflow.cli.batch import Planned, ResultWatcher, run_batch
    from relayflow.gcp.events import Events, build_publisher
    from relayflow.gcp.store import FlowStore, build_client
    from relayflow.settings import load_settings

    settings = load_settings()
    run = uuid.uuid4().hex[:6]
    ids = [f"occ-{run}-{i:05d}" for i in range(flows)]
    planned = [
        Planned(i, {"flow": "registration", "flow_id": i, "input": {"resource": i}}) for i in ids
    ]
    watcher = ResultWatcher(SubscriberClient(), settings.project_id, "flow-results")
    offsets, cpu_before = handlers.log_sizes(), cputime.cpu_seconds(handlers.pids)
    try:
        report = run_batch(
            planned,
            events=Events(build_publisher(), project=settings.project_id),
            store=FlowStore(build_client(settings)),
            watcher=watcher,
            topic="flow-requests",
            timeout_s=timeout_s,
            progress=_progress("relayflow", flows),
        )
    finally:
        watcher.close()
    time.sleep(SETTLE_S)
    cpu = cputime.delta(cpu_before, cputime.cpu_seconds(handlers.pids))
    served = handlers.requests(offsets)
    services = {name: Service(*served[name], cpu_s=cpu[name]) for name in HANDLERS}
    return Side(
        design="relayflow",
        delay_s=delay_s,
        flows=flows,
        ok=report.by_status().get("SUCCEEDED", 0),
        wall_s=report.elapsed_s,
        run_times_s=report.durations_s(),
        latencies_s=report.latencies_s(),
        polls=sum(r.polls for r in report.records),
        held_s=sum(service.held_s for service in services.values()),
        cpu_s=sum(service.cpu_s for service in services.values()),
        services=services,
    )


def _progress(design: str, flows: int) -> Callable[[int, int, float], None]:
    shown = {"t": -10.0}

    def show(done: int, total: int, elapsed_s: float) -> None:
        if elapsed_s - shown["t"] >= 10.0 or done == total:
            shown["t"] = elapsed_s
            print(f"    {design}: {done}/{flows} ended  {elapsed_s:6.1f}s", flush=True)

    return show


# -- the client API --------------------------------------------------------------------------


def set_activation_delay(client_api_url: str, delay_s: float) -> None:
    """Forget every registration, then make new ones activate ``delay_s`` after creation."""
    base = client_api_url.rstrip("/")
    requests.post(f"{base}/admin/reset", timeout=10).raise_for_status()
    config = {"activation_delay_s": delay_s}
    requests.post(f"{base}/admin/config", json=config, timeout=10).raise_for_status()


# -- the table -------------------------------------------------------------------------------


Column = tuple[str, Callable[[Side], float], str]
# header, figure, format; the ratio row divides relayflow's figure by the sleeping pool's.
COLUMNS: list[Column] = [
    ("polls/flow", lambda side: side.polls / side.flows, ".2f"),
    ("wall s", lambda side: side.wall_s, ".1f"),
    ("flows/s", lambda side: side.flows_per_s, ".2f"),
    ("run p50", lambda side: percentile(side.run_times_s, 50), ".1f"),
    ("run p95", lambda side: percentile(side.run_times_s, 95), ".1f"),
    ("e2e p50", lambda side: percentile(side.latencies_s, 50), ".1f"),
    ("e2e p95", lambda side: percentile(side.latencies_s, 95), ".1f"),
    ("held s", lambda side: side.held_s, ".1f"),
    ("held occ", lambda side: side.held_occupancy, ".1%"),
    ("cpu s", lambda side: side.cpu_s, ".1f"),
    ("cpu occ", lambda side: side.cpu_occupancy, ".2%"),
]
HEADER = ["delay", "design", "ok", *(header for header, _, _ in COLUMNS)]


def _row(side: Side) -> list[str]:
    figures = [format(figure(side), spec) for _, figure, spec in COLUMNS]
    return [f"{side.delay_s:g}s", side.design, f"{side.ok}/{side.flows}", *figures]


def _ratio_row(sleeping: Side, relayflow: Side) -> list[str]:
    def ratio(figure: Callable[[Side], float]) -> str:
        below = figure(sleeping)
        return f"{figure(relayflow) / below:.2f}x" if below else "-"

    ratios = [ratio(figure) for _, figure, _ in COLUMNS]
    return [f"{relayflow.delay_s:g}s", "relayflow ÷ sleeping", "", *ratios]


def table(sides: list[Side]) -> str:
    """Each delay's two designs and their ratio, in aligned columns."""
    rows = [HEADER]
    for sleeping, relayflow in zip(sides[::2], sides[1::2], strict=True):
        rows += [_row(sleeping), _row(relayflow), _ratio_row(sleeping, relayflow)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def per_request(sides: list[Side]) -> str:
    """relayflow's handlers, per request: how long a request held a thread, and its CPU."""
    lines = ["relayflow per request (mean): held ms = gunicorn %(D)s, cpu ms = process CPU"]
    for side in sides:
        for name, service in side.services.items():
            n = max(service.requests, 1)
            lines.append(
                f"  {side.delay_s:>4g}s {name:<7} {service.requests:>5} requests "
                f"({service.requests / side.flows:.2f}/flow)  held {service.held_s / n * 1e3:6.1f} "
                f"ms  cpu {service.cpu_s / n * 1e3:5.1f} ms"
            )
    return "\n".join(lines)


# -- the run ---------------------------------------------------------------------------------


def parse_plan(text: str) -> list[tuple[float, int]]:
    """``"5:192,20:96"`` -> [(5.0, 192), (20.0, 96)]: activation delays and flows at each."""
    plan = []
    for part in text.split(","):
        delay, _, flows = part.strip().partition(":")
        plan.append((float(delay), int(flows)))
    if not plan or any(d < 0 or not 1 <= n <= 10_000 for d, n in plan):
        raise ValueError(f"a plan is DELAY_S:FLOWS,... with 1 <= FLOWS <= 10000, got {text!r}")
    return plan


def inner(args: argparse.Namespace) -> int:
    from relayflow.settings import load_settings

    settings = load_settings()
    client_api_url = str(settings.client_api_url)
    handlers = Handlers.of(Path(args.state_dir) / "state.json")
    policy = poll_policy(settings)
    load_before = os.getloadavg()
    sides: list[Side] = []
    for delay_s, flows in parse_plan(args.plan):
        print(f"  activation delay {delay_s:g}s, {flows} flows each", flush=True)
        set_activation_delay(client_api_url, delay_s)
        print(f"    sleeping: {THREADS} threads …", flush=True)
        sides.append(run_sleeping(client_api_url, policy, delay_s, flows))
        set_activation_delay(client_api_url, delay_s)
        sides.append(run_relayflow(handlers, delay_s, flows, args.timeout_s))
    load_after = os.getloadavg()
    print()
    print(table(sides))
    print()
    print(per_request(sides))
    print(
        f"\nload average (1/5/15 min) before {_load(load_before)}, after {_load(load_after)}; "
        f"{os.cpu_count()} CPUs; poll policy initial {policy.initial_s:g}s x"
        f"{policy.multiplier:g} cap {policy.max_interval_s:g}s jitter ±{policy.jitter:.0%}"
    )
    return 0 if all(side.ok == side.flows for side in sides) else 1


def _load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in load)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plan", default=DEFAULT_PLAN, help="DELAY_S:FLOWS,... (%(default)s)")
    parser.add_argument("--base-port", type=int, default=8620)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        parse_plan(args.plan)
    except ValueError as error:
        parser.error(str(error))
    if args.inner:
        return inner(args)
    with tempfile.TemporaryDirectory(prefix="relayflow-occupancy-") as state_dir:
        base_env = {**os.environ, "GUNICORN_CMD_ARGS": GUNICORN_ACCESS_LOG}
        stack = Stack(ports=Ports(args.base_port), state_dir=Path(state_dir), base_env=base_env)
        print(f"starting a local stack on base port {args.base_port} …", flush=True)
        stack.up()
        try:
            argv = [sys.executable, __file__, "--inner", "--state-dir", state_dir, *sys.argv[1:]]
            env = {**os.environ, **stack.env()}
            return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
        finally:
            stack.down()


if __name__ == "__main__":
    sys.exit(main())
