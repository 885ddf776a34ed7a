"""The client API goes down for a minute under 500 flows in flight: with dependency breakers
and retry budgets, and with them off, side by side in one run.

    python bench/outage.py [--flows 500] [--outage-s 60] [--activation-s 45] [--runs 1]
                           [--base-port 8460] [--timeout-s 900]

Each mode runs on a fresh local stack (the same settings but ``RELAYFLOW_DEPENDENCIES``):
--flows registration flows are started and registered (every one in flight, most of them
polling for activation), then every business route of the client API answers 503 for
--outage-s seconds, then it is back. Printed for each mode:

    dead calls      requests the client API received while it was down
    failed          flows that did not succeed
    recovery s      from the API's return to the last flow's end (its ``finished_at``)
    p50 / p90 s     from the API's return to the end of half, and nine in ten, of the flows
                    that were still running then
    peak queued     the most Cloud Tasks tasks queued at once (sampled twice a second)
    probe/closed s  from the API's return to the probe that found it back (the breaker's last
                    half-opening), and to the breaker's closing (breakers on)
    requests        task requests the worker and poller served while the API was down
                    (Cloud Tasks dispatches), and the Firestore writes they made: what the
                    outage cost, whether the steps called the API or were put off
    after           the same from the API's return to the last flow's end: what recovery
                    cost (on this 2-core machine recovery is bound by how fast it is done)

and the ratio of dead calls (off ÷ on). Targets: at least 10x fewer calls to the dead API with
breakers on, no flow failed with them on that succeeded with them off, recovery no slower.

--runs N repeats the pair N times (off then on, each on a fresh stack) and ends with each
pair's ratios and their medians: the same code's recovery varies by ±20 % from run to run here,
so one pair says little about "no slower".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from chaos import client_api, wait_terminal  # noqa: E402
from e2e_flows import service_counters  # noqa: E402

from relayflow.gcp.store.keys import document_id  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

CLIENT_TIMEOUT_S = 2.0
# A deployment's policies, shorter: polls back off to 10 s, actions retry 5 times from 1 s.
ENV = {
    "RELAYFLOW_POLL_INITIAL_S": "1",
    "RELAYFLOW_POLL_MAX_INTERVAL_S": "10",
    "RELAYFLOW_RETRY_INITIAL_S": "1",
    "RELAYFLOW_RETRY_MAX_INTERVAL_S": "10",
    "RELAYFLOW_RETRY_MAX_ATTEMPTS": "5",
    "RELAYFLOW_CLIENT_API_TIMEOUT_S": str(CLIENT_TIMEOUT_S),
    "RELAYFLOW_SWEEP_GRACE_S": "30",
}
MODES = {
    "off": json.dumps({"default": {"enabled": False}}),
    "on": "",  # the defaults: what a deployment gets
}
DOWN = [{"status": 503, "probability": 1.0, "count": None}]


@dataclass
class Outcome:
    mode: str
    flows: int
    statuses: dict[str, int]
    dead_calls: int
    recovery_s: float
    p50_s: float
    p90_s: float
    peak_queued: int
    breaker: str
    closed_s: tuple[float, float] | None  # (probing began, closed)
    requests: int
    writes: int
    requests_after: int
    writes_after: int

    @property
    def failed(self) -> int:
        return self.flows - self.statuses.get("SUCCEEDED", 0)


def tasks_queued(ports: Ports) -> int:
    url = f"http://{HOST}:{ports.cloud_tasks_rest}/stats"
    return int(requests.get(url, timeout=5).json()["queued"])


class PeakQueued:
    """Samples the Cloud Tasks emulator's queued count twice a second; keeps the highest."""

    def __init__(self, ports: Ports) -> None:
        self.peak = 0
        self._ports = ports
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakQueued:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, tasks_queued(self._ports))


def wait_registered(stack: Stack, count: int, timeout_s: float) -> None:
    """Until the client API holds ``count`` live registrations: every flow is in flight."""
    deadline = time.monotonic() + timeout_s
    shown = -1
    while time.monotonic() < deadline:
        live = int(client_api(stack, "GET", "/stats")["live"]["registrations"])
        if live != shown:
            print(f"    {live}/{count} registered", flush=True)
            shown = live
        if live >= count:
            return
        threading.Event().wait(1.0)
    raise TimeoutError(f"only {shown} of {count} flows registered in {timeout_s:.0f}s")


def breaker_line(stack: Stack) -> str:
    url = f"http://{HOST}:{stack.ports.api}/breakers"
    found = requests.get(url, timeout=10).json()["breakers"]
    return "; ".join(
        f"{b['dependency']}: {' → '.join(t['to'] for t in b['transitions'])}" for b in found
    )


def run_mode(stack: Stack, mode: str, args: argparse.Namespace) -> Outcome:
    from google.cloud import firestore

    from relayflow.gcp.events import Events, build_publisher

    stack.wipe_firestore()
    client_api(stack, "POST", "/admin/reset")
    client_api(stack, "POST", "/admin/config", json={"activation_delay_s": args.activation_s})
    run = uuid.uuid4().hex[:6]
    bodies = [
        {
            "flow": "registration",
            "flow_id": f"outage-{mode}-{run}-{i:04d}",
            "input": {"resource": f"outage-{mode}-{run}-{i}"},
        }
        for i in range(args.flows)
    ]
    events = Events(build_publisher(), project="relayflow-local")
    with PeakQueued(stack.ports) as peak:
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [events.submit("flow-requests", json.dumps(b).encode()) for b in bodies]
            list(pool.map(lambda f: f.result(timeout=60), futures))
        wait_registered(stack, args.flows, args.timeout_s)
        before = int(client_api(stack, "GET", "/stats")["faults_injected"])
        spent = service_counters(stack.ports)
        client_api(stack, "POST", "/admin/faults", json=DOWN)
        print(f"    the client API is down for {args.outage_s:.0f}s", flush=True)
        threading.Event().wait(args.outage_s)  # the outage lasts this long: wall time is the point
        client_api(stack, "DELETE", "/admin/faults")
        back = datetime.now(UTC)
        dead_calls = int(client_api(stack, "GET", "/stats")["faults_injected"]) - before
        at_back = service_counters(stack.ports)
        spent = {k: v - spent.get(k, 0) for k, v in at_back.items()}
        print("    the client API is back", flush=True)
        db = firestore.Client(project="relayflow-local")
        ids = [str(b["flow_id"]) for b in bodies]
        due = sorted((at - back).total_seconds() for at in field_of(db, ids, "next_run_at"))
        last = due[-1] if due else 0.0
        print(f"    next tries due after it: p50 {quantile(due, 0.5):.1f}s, p90 "
              f"{quantile(due, 0.9):.1f}s, max {last:.1f}s", flush=True)  # fmt: skip
        statuses = wait_terminal(db, ids, args.timeout_s)
        after = {k: v - at_back.get(k, 0) for k, v in service_counters(stack.ports).items()}
    counted: dict[str, int] = {}
    for status in statuses.values():
        counted[status] = counted.get(status, 0) + 1
    ends = sorted(
        max(0.0, (end - back).total_seconds())
        for end in field_of(db, ids, "finished_at")
        if end > back
    ) or [0.0]
    for line in brought_forward(stack):
        print(f"    {line}", flush=True)
    print(f"    ended each second after the return: {per_second(ends)}", flush=True)
    return Outcome(
        mode, len(bodies), counted, dead_calls, ends[-1], quantile(ends, 0.5),
        quantile(ends, 0.9), peak.peak, breaker_line(stack), closed_after(stack, back),
        spent.get("ct_dispatched", 0), spent.get("firestore_writes", 0),
        after.get("ct_dispatched", 0), after.get("firestore_writes", 0),
    )  # fmt: skip


def brought_forward(stack: Stack) -> list[str]:
    """What the worker's and poller's logs say each breaker closing brought forward."""
    found = []
    for name in ("worker", "poller"):
        path = stack.log_path(name)
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        for line in lines:
            if '"breaker closed"' in line and "brought_forward" in line:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                found.append(
                    f"{name}: breaker closed at {entry.get('time', '?')}, "
                    f"brought forward {entry.get('brought_forward', '?')} "
                    f"in {entry.get('took_s', '?')}s"
                )
    return found


def field_of(db: Any, flow_ids: list[str], name: str) -> list[datetime]:
    """A time field of each flow's document (the emulator and this bench share a clock)."""
    refs = [db.collection("flows").document(document_id(flow_id)) for flow_id in flow_ids]
    found = [(snap.to_dict() or {}).get(name) for snap in db.get_all(refs)]
    return [at for at in found if isinstance(at, datetime)]


def per_second(ends: list[float]) -> str:
    """How many flows ended in each second after the API's return: where recovery went."""
    counts = [0] * (int(max(ends, default=0.0)) + 1)
    for end in ends:
        counts[int(end)] += 1
    return " ".join(str(n) for n in counts)


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def closed_after(stack: Stack, back: datetime) -> tuple[float, float] | None:
    """Seconds from the API's return to its breaker's last half-opening (the probe that found
    it back) and to its closing, if it closed after the return."""
    url = f"http://{HOST}:{stack.ports.api}/breakers"
    for breaker in requests.get(url, timeout=10).json()["breakers"]:
        seen = [(t["to"], datetime.fromisoformat(t["at"])) for t in breaker["transitions"]]
        closings = [i for i, (to, at) in enumerate(seen) if to == "closed" and at >= back]
        if not closings:
            continue
        last = closings[-1]
        probed = [at for to, at in seen[:last] if to == "half_open"]
        closed_s = (seen[last][1] - back).total_seconds()
        probed_s = (probed[-1] - back).total_seconds() if probed else closed_s
        return probed_s, closed_s
    return None


def table(outcomes: list[Outcome]) -> str:
    head = (
        f"{'breakers':<9} {'flows':>5} {'failed':>6} {'dead calls':>10} {'recovery s':>10} "
        f"{'p50 s':>6} {'p90 s':>6} {'peak queued':>11} {'probe/closed s':>14} {'requests':>8} "
        f"{'writes':>6} {'after':>11}  statuses"
    )
    rows = [head, "-" * len(head)]
    for o in outcomes:
        closed = "-" if o.closed_s is None else f"{o.closed_s[0]:.1f}/{o.closed_s[1]:.1f}"
        rows.append(
            f"{o.mode:<9} {o.flows:>5} {o.failed:>6} {o.dead_calls:>10} {o.recovery_s:>10.1f} "
            f"{o.p50_s:>6.1f} {o.p90_s:>6.1f} {o.peak_queued:>11} {closed:>14} {o.requests:>8} "
            f"{o.writes:>6} {f'{o.requests_after}/{o.writes_after}':>11}  "
            f"{json.dumps(o.statuses, sort_keys=True)}"
        )
    for o in outcomes:
        rows.append(f"breaker transitions ({o.mode}): {o.breaker or '-'}")
    by_mode = {o.mode: o for o in outcomes}
    if {"off", "on"} <= set(by_mode):
        off, on = by_mode["off"], by_mode["on"]
        ratio = off.dead_calls / max(1, on.dead_calls)
        rows.append(
            f"dead calls off/on: {ratio:.1f}x (target >= 10x); failed on {on.failed} vs off "
            f"{off.failed}; recovery on/off: {on.recovery_s / max(off.recovery_s, 0.1):.2f}"
        )
    return "\n".join(rows)


def inner(args: argparse.Namespace) -> int:
    pairs: list[list[Outcome]] = []
    with tempfile.TemporaryDirectory(prefix="relayflow-outage-") as tmp:
        for run in range(1, args.runs + 1):
            outcomes = []
            for mode in args.modes:
                outcomes.append(one_mode(mode, Path(tmp) / f"{mode}-{run}", args))
            if args.runs > 1:
                print(f"run {run} of {args.runs}:")
            print(table(outcomes), flush=True)
            pairs.append(outcomes)
    if args.runs > 1:
        print(summary(pairs))
    return 0


def one_mode(mode: str, state_dir: Path, args: argparse.Namespace) -> Outcome:
    env = {**os.environ, **ENV}
    if MODES[mode]:
        env["RELAYFLOW_DEPENDENCIES"] = MODES[mode]
    stack = Stack(
        ports=Ports(args.base_port), state_dir=state_dir, base_env=env, sweep_interval_s=5.0
    )
    print(f"breakers {mode}: starting a local stack …", flush=True)
    stack.up()
    try:
        return run_mode(stack, mode, args)
    finally:
        stack.down()


def summary(pairs: list[list[Outcome]]) -> str:
    """Each pair's ratios (on ÷ off, dead calls off ÷ on) and their medians."""
    rows = ["pair  dead calls off/on  recovery on/off  p50 on/off  failed on/off"]
    columns: list[list[float]] = [[], [], []]
    for i, outcomes in enumerate(pairs, 1):
        by_mode = {o.mode: o for o in outcomes}
        if not {"off", "on"} <= set(by_mode):
            continue
        off, on = by_mode["off"], by_mode["on"]
        ratios = (
            off.dead_calls / max(1, on.dead_calls),
            on.recovery_s / max(off.recovery_s, 0.1),
            on.p50_s / max(off.p50_s, 0.1),
        )
        for column, value in zip(columns, ratios, strict=True):
            column.append(value)
        rows.append(
            f"{i:>4}  {ratios[0]:>17.1f}x  {ratios[1]:>15.2f}  {ratios[2]:>10.2f}  "
            f"{on.failed:>6}/{off.failed}"
        )
    if columns[0]:
        m = [statistics.median(c) for c in columns]
        rows.append(f"median {m[0]:>15.1f}x  {m[1]:>15.2f}  {m[2]:>10.2f}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", type=int, default=500)
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--activation-s", type=float, default=45.0)
    parser.add_argument("--modes", default="off,on")
    parser.add_argument("--runs", type=int, default=1, help="pairs to run (medians of them)")
    parser.add_argument("--base-port", type=int, default=8460)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in MODES for m in args.modes) or not 1 <= args.flows <= 10_000:
        parser.error(f"modes from {', '.join(MODES)}; 1 <= flows <= 10000")
    if args.outage_s <= 0 or args.activation_s < 0:
        parser.error("--outage-s > 0 and --activation-s >= 0")
    if not 1 <= args.runs <= 20:
        parser.error("1 <= --runs <= 20")
    if args.inner:
        return inner(args)
    env = {**os.environ, **relayflow_env(Ports(args.base_port)), **ENV}
    argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
    return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
