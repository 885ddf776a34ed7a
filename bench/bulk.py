"""A bulk retry of 1,000 flows an outage of the client API failed, with its worker SIGKILLed
midway, on a local stack of its own.

    python bench/bulk.py [--flows 1000] [--rate 20] [--kill-batch 0.4] [--base-port 8480]
                         [--timeout-s 1800]

1. The outage: every business route of the fake client API answers 503; --flows registration
   flows are started, and each exhausts its tries (RETRIES_EXHAUSTED). The stack runs the
   client-api breaker with a large ``min_calls`` and retry allowance: with the default policy
   the breaker opens at once and the flows are put off (they wait, no try spent) instead of
   failing, which is what it is for; here they must fail, as after an hour without breakers.
2. The API is back. A dry run (``POST /bulk``) lists every failed flow and what a retry does
   to it; it changes nothing.
3. The run (``POST /bulk/{id}:run``) at --rate flows a second. When the batch at --kill-batch
   of the way is due, the worker is SIGKILLed a moment after it starts (its batch is then
   under way: the flows it retried are not recorded yet), and started again, as Cloud Run
   starts a new instance; the Cloud Tasks emulator delivers the batch again.

Printed: the dry run's time and counts; the run's time to the bulk action's end and to the
last flow's end; flows SUCCEEDED; duplicate effects at the client API (a resource registered
twice, an entity made twice); the client API's peak requests in any one second (sampled every
100 ms) against what the pace allows (a batch of flows at once, each making its first
request); flows whose history holds the bulk action's entry more than once, or that ran more
than one new generation (acted on twice: must be 0); and the flows of a batch delivered again
that the guard found already retried (the kill landed mid-batch).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from chaos import client_api, pids, wait_terminal  # noqa: E402

from relayflow.gcp.store.keys import document_id  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

# Short policies, as bench/outage.py's: an action tries 3 times within ~2 s, then fails.
ENV = {
    "RELAYFLOW_POLL_INITIAL_S": "0.5",
    "RELAYFLOW_POLL_MAX_INTERVAL_S": "2",
    "RELAYFLOW_RETRY_INITIAL_S": "0.5",
    "RELAYFLOW_RETRY_MAX_INTERVAL_S": "1",
    "RELAYFLOW_RETRY_MAX_ATTEMPTS": "3",
    "RELAYFLOW_CLIENT_API_TIMEOUT_S": "2",
    "RELAYFLOW_SWEEP_GRACE_S": "30",
    "RELAYFLOW_CLAIM_LEASE_S": "20",
    "RELAYFLOW_HANDLER_BUDGET_S": "10",
    # A flow that failed with a registration that may have been made (its answer was a 503)
    # undoes it after its end, as a clean-up, and is retried only once that is over: here
    # within seconds of the API's return (a deployment's first undo try is 30 s after).
    "RELAYFLOW_UNDO_INITIAL_S": "1",
    "RELAYFLOW_UNDO_MAX_INTERVAL_S": "5",
    # The breaker stays closed through the outage and retries are not held back by their
    # budget, so every flow exhausts its tries (see the module docstring).
    "RELAYFLOW_DEPENDENCIES": json.dumps(
        {"dependencies": {"client-api": {"min_calls": 100000, "min_retries": 100000}}}
    ),
}
DOWN = [{"status": 503, "count": None}]
SAMPLE_S = 0.1


class Requests:
    """Samples the client API's request counter every SAMPLE_S; the most in any second."""

    def __init__(self, stack: Stack) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stack = stack
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Requests:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        url = f"http://{HOST}:{self._stack.ports.client_api}/stats"
        while not self._stop.wait(SAMPLE_S):  # a bench sampling, not a handler waiting
            try:
                count = int(requests.get(url, timeout=5).json()["requests"])
            except requests.RequestException:
                continue
            self.samples.append((time.monotonic(), count))

    def per_second(self) -> list[int]:
        """Requests in each whole second from the first sample (by the samples' ends)."""
        if not self.samples:
            return []
        t0, n0 = self.samples[0]
        counts: list[int] = []
        last = n0
        for t, n in self.samples:
            second = int(t - t0)
            while len(counts) <= second:
                counts.append(0)
            counts[second] += n - last
            last = n
        return counts

    def peak_per_s(self) -> tuple[int, float]:
        """The most requests in any window of one second, and when it began (s from the
        first sample)."""
        best, at = 0, 0.0
        j = 0
        for i, (t, n) in enumerate(self.samples):
            while self.samples[j][0] < t - 1.0:
                j += 1
            if j < i and n - self.samples[j][1] > best:
                best, at = n - self.samples[j][1], self.samples[j][0] - self.samples[0][0]
        return best, at


def publish_all(bodies: list[dict[str, Any]]) -> None:
    from relayflow.gcp.events import Events, build_publisher

    events = Events(build_publisher(), project="relayflow-local")
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [events.submit("flow-requests", json.dumps(b).encode()) for b in bodies]
        list(pool.map(lambda f: f.result(timeout=60), futures))


def api(stack: Stack, method: str, path: str, **kw: Any) -> Any:
    response = requests.request(method, f"http://{HOST}:{stack.ports.api}{path}", timeout=600, **kw)
    response.raise_for_status()
    return response.json()


def kill_worker_mid_batch(stack: Stack, bulk_id: str, at_batch: int) -> str:
    """SIGKILL the worker a moment after batch ``at_batch`` is due (it is then running),
    start it again; what was seen."""
    while True:
        doc = api(stack, "GET", f"/bulk/{bulk_id}")
        if doc["state"] != "running":
            return f"not killed: the bulk action was {doc['state']} first"
        if doc["next_batch"] >= at_batch and doc.get("next_at"):
            due = datetime.fromisoformat(doc["next_at"])
            wait_s = (due - datetime.now(UTC)).total_seconds() + 0.3
            threading.Event().wait(max(0.0, wait_s))  # until its batch has begun
            os.killpg(pids(stack)["worker"], signal.SIGKILL)
            killed = f"worker SIGKILLed at batch {doc['next_batch']} of {doc['batches']}"
            began = time.monotonic()
            stack.up()  # starts exactly what died, as Cloud Run starts a new instance
            return f"{killed}; started again in {time.monotonic() - began:.1f}s"
        threading.Event().wait(0.05)


def acted_twice(db: Any, flow_ids: list[str], bulk_id: str) -> tuple[int, int]:
    """Flows whose history holds the bulk action's entry more than once, and flows retried
    into more than one new generation."""
    twice = generations = 0
    for start in range(0, len(flow_ids), 300):
        refs = [db.collection("flows").document(document_id(f)) for f in flow_ids[start:][:300]]
        for snap in db.get_all(refs):
            doc = snap.to_dict() or {}
            entries = [e for e in doc.get("history", []) if e.get("bulk") == bulk_id]
            twice += len(entries) > 1
            generations += int(doc.get("position", {}).get("generation", 0)) > 1
    return twice, generations


def starts_per_second(db: Any, flow_ids: list[str]) -> list[int]:
    """How many retried flows ran their first step again in each second of the run (their
    histories' first entry of generation 1): the pace the bulk action kept."""
    firsts: list[datetime] = []
    for start in range(0, len(flow_ids), 300):
        refs = [db.collection("flows").document(document_id(f)) for f in flow_ids[start:][:300]]
        for snap in db.get_all(refs):
            entries = (snap.to_dict() or {}).get("history", [])
            ran = [e["at"] for e in entries if e.get("generation") == 1 and not e.get("by")]
            if ran:
                firsts.append(min(ran))
    if not firsts:
        return []
    t0 = min(firsts)
    counts = [0] * (int((max(firsts) - t0).total_seconds()) + 1)
    for at in firsts:
        counts[int((at - t0).total_seconds())] += 1
    return counts


def duplicates(stack: Stack, resources: set[str]) -> tuple[int, int]:
    """Resources registered more than once, and registrations with more than one entity."""
    live = client_api(stack, "GET", "/stats?detail=1")["live"]
    by_resource: dict[str, list[str]] = live["registrations_by_resource"]
    entities: dict[str, list[str]] = live["entities_by_registration"]
    regs = sum(len(v) - 1 for k, v in by_resource.items() if k in resources and len(v) > 1)
    ents = sum(len(v) - 1 for v in entities.values() if len(v) > 1)
    return regs, ents


def rows_of(stack: Stack, bulk_id: str, pages: int) -> list[dict[str, Any]]:
    return [
        row
        for page in range(max(1, pages))
        for row in api(stack, "GET", f"/bulk/{bulk_id}/previews?page={page}")["previews"]
    ]


def outage(stack: Stack, args: argparse.Namespace, run: str) -> list[dict[str, Any]]:
    """Start the flows during the outage; their start messages once every one has ended."""
    from google.cloud import firestore

    client_api(stack, "POST", "/admin/reset")
    client_api(stack, "POST", "/admin/config", json={"activation_delay_s": 0})
    client_api(stack, "POST", "/admin/faults", json=DOWN)
    bodies = [
        {"flow": "registration", "flow_id": f"b-{run}-{i:04d}", "input": {"resource": f"{run}-{i}"}}
        for i in range(args.flows)
    ]
    print(f"the client API is down; starting {args.flows} flows …", flush=True)
    publish_all(bodies)
    ids = [str(b["flow_id"]) for b in bodies]
    statuses = wait_terminal(firestore.Client(project="relayflow-local"), ids, args.timeout_s)
    counted: dict[str, int] = {}
    for status in statuses.values():
        counted[status] = counted.get(status, 0) + 1
    print(f"after the outage: {json.dumps(counted, sort_keys=True)}", flush=True)
    client_api(stack, "DELETE", "/admin/faults")
    wait_cleaned(firestore.Client(project="relayflow-local"), ids, args.timeout_s)
    return bodies


def wait_cleaned(db: Any, flow_ids: list[str], timeout_s: float) -> None:
    """Until no flow's clean-up is pending (the API is back: each undoes what it may have
    left); a flow is retried only once its clean-up is over."""
    deadline = time.monotonic() + timeout_s
    left = list(flow_ids)
    while left and time.monotonic() < deadline:
        refs = [db.collection("flows").document(document_id(f)) for f in left]
        pending = {
            snap.id
            for snap in db.get_all(refs)
            if ((snap.to_dict() or {}).get("cleanup") or {}).get("state") == "pending"
        }
        left = [f for f in left if document_id(f) in pending]
        print(f"    {len(flow_ids) - len(left)}/{len(flow_ids)} cleaned up", flush=True)
        threading.Event().wait(1.0)  # a bench polling Firestore, not a handler


def inner(args: argparse.Namespace) -> int:
    from google.cloud import firestore

    env = {**os.environ, **ENV}
    with tempfile.TemporaryDirectory(prefix="relayflow-bulk-") as tmp:
        stack = Stack(ports=Ports(args.base_port), state_dir=Path(tmp), base_env=env)
        print("starting a local stack …", flush=True)
        stack.up()
        try:
            return measure(stack, args, firestore.Client(project="relayflow-local"))
        finally:
            stack.down()


def measure(stack: Stack, args: argparse.Namespace, db: Any) -> int:
    run = uuid.uuid4().hex[:6]
    since = datetime.now(UTC).isoformat()
    bodies = outage(stack, args, run)
    ids = [str(b["flow_id"]) for b in bodies]
    resources = {str(b["input"]["resource"]) for b in bodies}
    began = time.monotonic()
    body = {
        "action": "retry",
        "filter": {"flow": "registration", "status": "FAILED", "updated_from": since},
        "reason": "client API back after its outage",
        "rate_per_s": args.rate,
    }
    made = api(stack, "POST", "/bulk", json=body)
    dry_s = time.monotonic() - began
    first = made["previews"][0]
    print(f"dry run: {dry_s:.1f}s, {made['matched']} matched, {made['allowed']} to retry; "
          f"e.g. {first['flow_id']}: {first['code']}, would run {', '.join(first['rerun'])}; "
          f"refused: {json.dumps(made['refused'])}", flush=True)  # fmt: skip
    before = int(client_api(stack, "GET", "/stats")["requests"])
    with Requests(stack) as sampled:
        started = time.monotonic()
        api(stack, "POST", f"/bulk/{made['id']}:run", json={"reason": "go"})
        at = max(1, int(made["batches"] * args.kill_batch))
        print(kill_worker_mid_batch(stack, made["id"], at), flush=True)
        done = wait_bulk(stack, made["id"], args.timeout_s)
        bulk_s = time.monotonic() - started
        statuses = wait_terminal(db, ids, args.timeout_s)
        ended_s = time.monotonic() - started
    requests_made = int(client_api(stack, "GET", "/stats")["requests"]) - before
    times = (bulk_s, ended_s, dry_s)
    report(stack, db, made, done, (ids, resources), statuses, times, sampled, requests_made, args)
    return 0


def wait_bulk(stack: Stack, bulk_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    shown = ""
    while time.monotonic() < deadline:
        doc = api(stack, "GET", f"/bulk/{bulk_id}")
        line = f"    bulk {doc['state']}: {doc['done']}/{doc['matched']} done"
        if doc.get("waiting"):
            line += f" (waiting: {doc['waiting']})"
        if line != shown:
            print(line, flush=True)
            shown = line
        if doc["state"] != "running":
            return dict(doc)
        threading.Event().wait(1.0)  # a bench polling the api, not a handler
    raise TimeoutError(f"bulk action {bulk_id} still running after {timeout_s:.0f}s")


def report(
    stack: Stack,
    db: Any,
    made: dict[str, Any],
    done: dict[str, Any],
    flows: tuple[list[str], set[str]],
    statuses: dict[str, str],
    times: tuple[float, float, float],
    sampled: Requests,
    requests_made: int,
    args: argparse.Namespace,
) -> None:
    ids, resources = flows
    dry_s = times[2]
    succeeded = sum(1 for s in statuses.values() if s == "SUCCEEDED")
    regs, ents = duplicates(stack, resources)
    twice, generations = acted_twice(db, ids, made["id"])
    rows = rows_of(stack, made["id"], int(done["chunks"]))
    caught = sum(1 for r in rows if r.get("note", "").startswith("acted on by an earlier"))
    peak, peak_at = sampled.peak_per_s()
    starts = starts_per_second(db, ids)
    per_flow = requests_made / max(1, succeeded)
    batch = int(made["batch_size"])
    pace = args.rate * per_flow
    lines = [
        f"bulk retry of {len(ids)} flows failed by an outage "
        f"({args.rate:g} flows/s, batches of {batch})",
        ("dry run", f"{dry_s:.1f} s: {made['matched']} matched, {made['allowed']} to retry"),
        ("time, run to bulk done", f"{times[0]:.1f} s ({len(ids) / args.rate:.0f} s at the pace)"),
        ("time, run to last flow ended", f"{times[1]:.1f} s"),
        ("SUCCEEDED", f"{succeeded} of {len(ids)} (bulk: done {done['done']}, "
                      f"skipped {done['skipped']}, failed {done['failed']})"),
        ("duplicate effects at the API", f"{regs} registrations, {ents} entities"),
        ("client API requests in the run", f"{requests_made} ({per_flow:.2f} a flow)"),
        ("peak requests in one second", f"{peak} at {peak_at:.0f} s (the pace: {pace:.0f}/s on "
                                        "average)"),
        ("flows started again a second", f"at most {max(starts, default=0)} (the rate: "
                                         f"{args.rate:g})"),
        ("flows acted on twice", f"{twice} (audit entries), {generations} (generations)"),
        ("batch redelivered, found done", f"{caught} flows (the guard's; counted once)"),
    ]  # fmt: skip
    print()
    for line in lines:
        print(line if isinstance(line, str) else f"  {line[0]:<32} {line[1]}", flush=True)
    print(f"  requests each second: {' '.join(map(str, sampled.per_second()))}")
    print(f"  flows started each second: {' '.join(map(str, starts))}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0, help="flows a second (0.01..50)")
    parser.add_argument("--kill-batch", type=float, default=0.4, help="where to kill: 0..1")
    parser.add_argument("--base-port", type=int, default=8480)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.flows <= 10_000 or not 0.01 <= args.rate <= 50:
        parser.error("1 <= --flows <= 10000 and 0.01 <= --rate <= 50")
    if not 0 < args.kill_batch < 1:
        parser.error("0 < --kill-batch < 1")
    if args.inner:
        return inner(args)
    env = {**os.environ, **relayflow_env(Ports(args.base_port)), **ENV}
    argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
    return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
