"""Queue shards, scaled down: K shards per kind of queue raise a rate-limited stack's throughput
close to K times, and spread the load evenly.

    python bench/shards.py [--shards 1,2,4,8] [--flows 480] [--rate 2] [--base-port 8520]

A Cloud Tasks queue dispatches at most 500 tasks per second
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#ratelimits);
relayflow gives each kind of queue N shards and sends all of a flow's tasks to its own. Here
every queue of a fresh local stack is limited to ``--rate`` dispatches per second (our Cloud
Tasks emulator enforces a queue's max_dispatches_per_second with a token bucket,
relayflow/emulators/cloud_tasks/ratelimit.py), so with one shard the steps and polls queues cap the
batch; with K shards K queues of each kind share the flows. For each K it runs ``--flows``
registration flows (bench/e2e_flows.py's batch, activation after ``--activation-s``) and prints
flows/s, tasks dispatched/s, each as a ratio to one shard, and, per kind, the load balance:
the most tasks any of its K shards dispatched ÷ the mean (from the emulator's
``dispatched_by_queue``). It also prints the machine's CPU use over the batch: near 100 % of
its cores, the machine, not the queues, is what caps throughput (lower ``--rate`` then).

Why 2/s and not 20/s: on a 2-core machine the whole stack (emulators, services) spends about
75 ms of CPU per task, so it runs at most ~25 tasks/s; 20/s per queue is 40 tasks/s with one
shard and 320 with eight, so the machine, not the queues, would cap every run. At 2/s eight
shards of steps and polls allow 32 tasks/s, about half the machine. Enough flows that each of
8 shards gets ~60 (the hash spreads n flows over K shards with max ÷ mean near
1 + 1.4·sqrt(K/n)): with few flows the fullest shard, which finishes last, sets the time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cputime  # noqa: E402
from bench.e2e_flows import component_pids, run  # noqa: E402
from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

_SHARD_SUFFIX = re.compile(r"-[1-9][0-9]*$")


@dataclass(frozen=True)
class Result:
    """What one batch on K shards did."""

    shards: int
    flows: int
    succeeded: int
    elapsed_s: float
    dispatched: int
    # Per kind of queue (its shard 0 name): tasks each of its K shards dispatched.
    per_shard: dict[str, list[int]]
    cpu_share: float  # CPU used over the batch ÷ (cores x wall time)

    @property
    def flows_per_s(self) -> float:
        return self.succeeded / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def tasks_per_s(self) -> float:
        return self.dispatched / self.elapsed_s if self.elapsed_s else 0.0

    def balance(self, kind: str) -> float:
        """Max ÷ mean tasks per shard of ``kind`` (1.0 is perfectly even)."""
        counts = self.per_shard.get(kind, [])
        mean = sum(counts) / len(counts) if counts else 0.0
        return max(counts) / mean if mean else 0.0


def kind_of(queue: str, names: set[str]) -> str | None:
    """The kind (its shard 0 name) whose shard ``queue`` is, or None if not ours."""
    if queue in names:
        return queue
    base = _SHARD_SUFFIX.sub("", queue)
    return base if base in names and base != queue else None


def per_shard(dispatched: dict[str, int], kinds: list[str], shards: int) -> dict[str, list[int]]:
    """Tasks dispatched by each shard (0 .. shards-1) of each kind that dispatched any."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * shards)
    for queue, n in dispatched.items():
        kind = kind_of(queue, set(kinds))
        if kind is None or not n:
            continue
        shard = 0 if queue == kind else int(queue.rsplit("-", 1)[1])
        if shard < shards:
            counts[kind][shard] += n
    return dict(counts)


def _stats(ports: Ports) -> dict[str, Any]:
    response = requests.get(f"http://{HOST}:{ports.cloud_tasks_rest}/stats", timeout=10)
    response.raise_for_status()
    return dict(response.json())


def _activate_after(ports: Ports, seconds: float) -> None:
    url = f"http://{HOST}:{ports.client_api}/admin/config"
    requests.post(url, json={"activation_delay_s": seconds}, timeout=10).raise_for_status()


def one_batch(args: argparse.Namespace, shards: int, state_dir: Path) -> Result:
    """A fresh stack with ``shards`` queues per kind at ``args.rate`` each; one batch on it."""
    ports = Ports(args.base_port)
    stack = Stack(
        ports=ports,
        state_dir=state_dir,
        queue_shards=shards,
        queue_rate=args.rate,
        sweep_interval_s=0,  # no sweeper: nothing is lost here, and it would only add load
    )
    print(f"shards={shards}: starting a local stack on base port {args.base_port} …", flush=True)
    stack.up()
    saved = dict(os.environ)
    try:
        os.environ.update(stack.env())  # the batch's clients find the stack as a child would
        _activate_after(ports, args.activation_s)
        kinds = [q.name for q in stack.topology().queues.all()]
        pids = component_pids(state_dir)
        before, cpu_before, t0 = _stats(ports), cputime.cpu_seconds(pids), time.monotonic()
        batch = run(args.flows, args.timeout_s, ports, state_dir)
        wall = time.monotonic() - t0
        cpu = cputime.total(cputime.delta(cpu_before, cputime.cpu_seconds(pids)), list(pids))
        after = _stats(ports)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        stack.down()
    delta = {
        q: n - before["dispatched_by_queue"].get(q, 0)
        for q, n in after["dispatched_by_queue"].items()
    }
    report = batch.report
    return Result(
        shards=shards,
        flows=args.flows,
        succeeded=report.by_status().get("SUCCEEDED", 0),
        elapsed_s=report.elapsed_s,
        dispatched=after["dispatched"] - before["dispatched"],
        per_shard=per_shard(delta, kinds, shards),
        cpu_share=cpu / ((os.cpu_count() or 1) * wall) if wall else 0.0,
    )


def table(results: list[Result], kinds: tuple[str, ...] = ("flow-steps", "flow-polls")) -> str:
    """One row per shard count: throughput, its ratio to one shard, and the load balance."""
    base = next((r for r in results if r.shards == 1), results[0])
    head = ["shards", "flows", "ok", "wall_s", "flows/s", "x1", "tasks/s", "x1"]
    head += [f"{k} max/mean" for k in kinds] + ["cpu"]
    rows = [head]
    for r in results:
        rows.append(
            [
                str(r.shards),
                str(r.flows),
                str(r.succeeded),
                f"{r.elapsed_s:.1f}",
                f"{r.flows_per_s:.2f}",
                f"{r.flows_per_s / base.flows_per_s:.2f}" if base.flows_per_s else "-",
                f"{r.tasks_per_s:.1f}",
                f"{r.tasks_per_s / base.tasks_per_s:.2f}" if base.tasks_per_s else "-",
                *(f"{r.balance(k):.2f}" for k in kinds),
                f"{r.cpu_share:.0%}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", default="1,2,4,8", help="shard counts to run, in order")
    parser.add_argument("--flows", type=int, default=480)
    parser.add_argument("--rate", type=float, default=2.0, help="dispatches/s of every queue")
    parser.add_argument("--activation-s", type=float, default=1.0)
    parser.add_argument("--base-port", type=int, default=8520)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--json", action="store_true", help="also print each result as JSON")
    args = parser.parse_args()
    try:
        counts = [int(s) for s in args.shards.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--shards is a comma-separated list of whole numbers, not {args.shards!r}")
    if not counts or min(counts) < 1 or not 1 <= args.flows <= 100_000 or args.rate <= 0:
        parser.error("--shards >= 1 each, --flows in 1..100000, --rate > 0")
    results = []
    for shards in counts:
        with tempfile.TemporaryDirectory(prefix="relayflow-shards-") as state_dir:
            result = one_batch(args, shards, Path(state_dir))
        results.append(result)
        if args.json:
            print(json.dumps(vars(result) | {"flows_per_s": result.flows_per_s}), flush=True)
    print(f"\nper-queue limit {args.rate:g}/s, {args.flows} flows per run, "
          f"{os.cpu_count()} cores, activation after {args.activation_s:g}s")  # fmt: skip
    print(table(results))
    return 0 if all(r.succeeded == r.flows for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
