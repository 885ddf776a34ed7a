"""The chaos suite: the reference flow through a local stack under each fault, counted.

    python bench/chaos.py [--flows 200] [--scenarios kill,death,pause,faults,duplicates,lost]
                          [--pause-s 30] [--outage-s 60] [--base-port 8420] [--timeout-s 900]

Scenarios (each on the same stack, Firestore wiped and the client API reset in between; the
duplicates scenario on a second stack whose Cloud Tasks emulator delivers every task twice):

    kill        SIGKILL the worker and the poller in turn, mid external call (the client API
                answers slowly), and `local up` brings each back
    death       the worker, the poller and the start function die together while the flows
                run; 10 s later `local up` restarts them. (They die once every start message
                has been taken: the Pub/Sub emulator never pushes again a message whose push
                was refused, where Pub/Sub retries it with backoff, so a start function down
                while messages arrive loses them on the emulator only.)
    pause       the Firestore emulator, then the Cloud Tasks emulator, stopped (SIGSTOP) for
                --pause-s seconds each
    faults      the client API fails 20 % of calls with 5xx, 5 % with 429 + Retry-After, loses
                10 % of responses (effect done, 500 returned), answers 5 % slower than the
                client timeout, on every business route, for the whole run
    duplicates  every task delivered twice, concurrently; every start message published twice
    lost        the client API loses every response (each call takes effect, then answers 500)
                on every business route for --outage-s seconds, and the flows' deadline is
                half of that: they time out or fail, and every effect they made must be
                undone — by the clean-up that goes on after each flow has ended, once the
                API is back

Each scenario runs --flows registration flows and one `fleet` flow per 20 of them (every shape:
a ForEach of five callback steps with a safety-net poll, an If, a join).

For each it prints: flows, terminal, stuck (not ended when the drain times out), SUCCEEDED,
live registrations and entities at the client API against SUCCEEDED flows (a fleet's items that
failed for good, and were undone, do not count; the few failed items are named), duplicate effects
(two live registrations for one resource, two live entities for one registration), orphaned
effects (live for a flow that did not succeed, or an entity whose registration is gone), and
the time to drain (faults over -> every flow ended), and how many clean-ups (undos that went
on after a flow's end) ended done, were still pending, or were abandoned. Every dependency
recovers in each scenario, so the target is 0 stuck, 0 duplicate or orphaned effects, no
clean-up pending or abandoned, and 100 % SUCCEEDED — except in ``lost``, where the flows are
meant to fail and the target is every effect of theirs undone (no orphan); the exit status
is 0 only if every scenario meets it.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relayflow.gcp.store.keys import document_id, key_of  # noqa: E402
from relayflow.local import statefile  # noqa: E402
from relayflow.local.environment import relayflow_env  # noqa: E402
from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

SCENARIOS = ("kill", "death", "pause", "faults", "duplicates", "lost")
CLIENT_TIMEOUT_S = 2.0
# Fast policies (the same settings a deployment uses, shorter) and generous retries: under 40 %
# injected faults a step needs many tries, and production retry budgets are as generous.
CHAOS_ENV = {
    "RELAYFLOW_POLL_INITIAL_S": "0.5",
    "RELAYFLOW_POLL_MAX_INTERVAL_S": "2",
    "RELAYFLOW_RETRY_INITIAL_S": "0.2",
    "RELAYFLOW_RETRY_MAX_INTERVAL_S": "2",
    "RELAYFLOW_RETRY_MAX_ATTEMPTS": "15",
    "RELAYFLOW_CLIENT_API_TIMEOUT_S": str(CLIENT_TIMEOUT_S),
    "RELAYFLOW_SWEEP_GRACE_S": "15",
    # Handlers here take at most a few seconds: a short lease lets a killed worker's step be
    # taken over in 20 s rather than the 150 s a 120 s dispatch deadline needs.
    "RELAYFLOW_CLAIM_LEASE_S": "20",
    "RELAYFLOW_HANDLER_BUDGET_S": "10",
    # A clean-up tries again within 5 s once its dependency is back, not within an hour.
    "RELAYFLOW_UNDO_INITIAL_S": "1",
    "RELAYFLOW_UNDO_MAX_INTERVAL_S": "5",
}
SWEEP_INTERVAL_S = 5.0
FLEET_SIZE = 5  # resources per fleet flow
TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED"}


@dataclass
class Outcome:
    """One scenario's figures."""

    scenario: str
    flows: int
    terminal: int
    succeeded: int
    statuses: dict[str, int]
    live_registrations: int
    expected_registrations: int
    live_entities: int
    duplicates: int
    orphans: int
    drain_s: float
    cleanups: dict[str, int]

    @property
    def stuck(self) -> int:
        return self.flows - self.terminal

    @property
    def ok(self) -> bool:
        clean = self.stuck == 0 and self.duplicates == 0 and self.orphans == 0
        clean = clean and not self.cleanups.get("pending") and not self.cleanups.get("abandoned")
        effects = self.live_registrations == self.expected_registrations
        effects = effects and self.live_entities == self.succeeded
        if self.scenario == "lost":  # flows fail: what they did must all be undone
            return clean and effects and self.cleanups.get("done", 0) > 0
        return clean and effects and self.succeeded == self.flows


# -- the stack's processes -----------------------------------------------------------------------


def pids(stack: Stack) -> dict[str, int]:
    state = statefile.load(stack.state_file)
    assert state is not None, "the stack is not running"
    return {record.name: record.pid for record in state.processes}


def signal_group(stack: Stack, name: str, signum: signal.Signals) -> None:
    os.killpg(pids(stack)[name], signum)  # each component leads its own process group


def client_api(stack: Stack, method: str, path: str, **kw: Any) -> Any:
    url = f"http://{HOST}:{stack.ports.client_api}{path}"
    response = requests.request(method, url, timeout=10, **kw)
    response.raise_for_status()
    return response.json()


# -- faults ---------------------------------------------------------------------------------------


def slow_calls(stack: Stack) -> None:
    """Half the calls take 0.5 s: a kill lands mid external call."""
    client_api(
        stack, "POST", "/admin/faults", json=[{"delay_s": 0.5, "probability": 0.5, "count": None}]
    )


def kill(stack: Stack, stop: threading.Event) -> None:
    slow_calls(stack)
    for i in range(6):
        if stop.wait(3.0):
            return
        signal_group(stack, ("worker", "poller")[i % 2], signal.SIGKILL)
        stack.up()  # heals: restarts exactly what died


def death(stack: Stack, stop: threading.Event, started: threading.Event) -> None:
    if not started.wait(120.0) or stop.is_set():
        return
    for name in ("worker", "poller", "start_function"):
        signal_group(stack, name, signal.SIGKILL)
    stop.wait(10.0)
    stack.up()


def pause(stack: Stack, stop: threading.Event, pause_s: float) -> None:
    for name in ("firestore", "cloud_tasks"):
        if stop.wait(2.0):
            return
        signal_group(stack, name, signal.SIGSTOP)
        try:
            stop.wait(pause_s)
        finally:
            signal_group(stack, name, signal.SIGCONT)


def lost(stack: Stack, stop: threading.Event, outage_s: float) -> None:
    """Every response lost (the call takes effect, then 500) for ``outage_s``."""
    rules = [{"status": 500, "after_effect": True, "count": None}]
    client_api(stack, "POST", "/admin/faults", json=rules)
    try:
        stop.wait(outage_s)
    finally:
        client_api(stack, "DELETE", "/admin/faults")


def faults(stack: Stack, stop: threading.Event) -> None:
    timeout_fault = CLIENT_TIMEOUT_S + 1.0
    rules = [
        {"status": 503, "probability": 0.20, "count": None},
        {"status": 429, "retry_after_s": 1, "probability": 0.05, "count": None},
        {"status": 500, "after_effect": True, "probability": 0.10, "count": None},
        {"delay_s": timeout_fault, "probability": 0.05, "count": None},
    ]
    client_api(stack, "POST", "/admin/faults", json=rules)


Fault = Callable[[Stack, threading.Event, threading.Event, argparse.Namespace], None]
FAULTS: dict[str, Fault] = {
    "kill": lambda stack, stop, started, args: kill(stack, stop),
    "death": lambda stack, stop, started, args: death(stack, stop, started),
    "pause": lambda stack, stop, started, args: pause(stack, stop, args.pause_s),
    "faults": lambda stack, stop, started, args: faults(stack, stop),
    "duplicates": lambda stack, stop, started, args: None,
    "lost": lambda stack, stop, started, args: lost(stack, stop, args.outage_s),
}


# -- one scenario ---------------------------------------------------------------------------------


def run_scenario(stack: Stack, name: str, args: argparse.Namespace) -> Outcome:
    from google.cloud import firestore

    from relayflow.gcp.events import Events, build_publisher

    stack.wipe_firestore()
    client_api(stack, "DELETE", "/admin/faults")
    client_api(stack, "POST", "/admin/reset")
    run = uuid.uuid4().hex[:6]
    bodies = [
        {
            "flow": "registration",
            "flow_id": f"{name}-{run}-{i:04d}",
            "input": {"resource": f"{name}-{run}-{i}"},
        }
        for i in range(args.flows)
    ]
    # and a few flows of every shape: a ForEach of callback steps (with a safety-net poll),
    # an If, a join, against the same client API
    bodies += [
        {
            "flow": "fleet",
            "flow_id": f"{name}-{run}-fleet{j}",
            "input": {"resources": [f"{name}-{run}-fleet{j}-{k}" for k in range(FLEET_SIZE)]},
        }
        for j in range(max(1, args.flows // 20))
    ]
    if name == "lost":
        # Their deadline passes during the outage.
        bodies = [{**body, "deadline_s": args.outage_s / 2} for body in bodies]
    events = Events(build_publisher(), project="relayflow-local")
    stop, started = threading.Event(), threading.Event()
    injector = threading.Thread(target=FAULTS[name], args=(stack, stop, started, args), daemon=True)
    injector.start()
    copies = 2 if name == "duplicates" else 1
    with ThreadPoolExecutor(max_workers=8) as pool:  # concurrent copies of each message
        futures = [
            events.submit("flow-requests", json.dumps(body).encode())
            for body in bodies
            for _ in range(copies)
        ]
        list(pool.map(lambda f: f.result(timeout=60), futures))
    db = firestore.Client(project="relayflow-local")
    flow_ids = [str(b["flow_id"]) for b in bodies]
    threading.Thread(target=wait_created, args=(db, flow_ids, started), daemon=True).start()
    injector.join()  # the fault is over (or, for faults, armed for the whole run)
    recovered = time.monotonic()
    statuses = wait_terminal(db, flow_ids, args.timeout_s)
    cleanups = wait_cleaned(db, flow_ids, args.timeout_s)
    drain_s = time.monotonic() - recovered
    stop.set()
    client_api(stack, "DELETE", "/admin/faults")
    for line in failed_items(db, flow_ids) + unsuccessful(db, statuses):
        print(f"    {line}", flush=True)
    failed = fleet_failures(db, [str(b["flow_id"]) for b in bodies if b["flow"] == "fleet"])
    return outcome(stack, name, bodies, statuses, drain_s, cleanups, failed)


def fleet_failures(db: Any, fleet_ids: list[str]) -> dict[str, set[int]]:
    """Each fleet's items that failed for good (its result's ``failed``): a fleet succeeds
    with a few of them, and their registrations must be undone, not live."""
    refs = [db.collection("flows").document(document_id(flow_id)) for flow_id in fleet_ids]
    failed: dict[str, set[int]] = {}
    for snap in db.get_all(refs):
        data = ((snap.to_dict() or {}).get("result") or {}).get("data") or {}
        failed[key_of(snap.id)] = set(data.get("failed") or [])
    return failed


def failed_items(db: Any, flow_ids: list[str], shown: int = 5) -> list[str]:
    """Why ForEach items failed (their lane's last entries), for a few of them: a fleet that
    succeeded with a failed item has one registration fewer live than its resources."""
    from google.cloud.firestore import FieldFilter

    lines: list[str] = []
    query = db.collection("flow_lanes").where(filter=FieldFilter("failed_items", "!=", []))
    for snap in query.limit(50).stream():
        lane = snap.to_dict() or {}
        if lane.get("parent") not in flow_ids:
            continue
        last = [h for h in lane.get("history", []) if h.get("kind") != "compensate"][-2:]
        said = "; ".join(f"{h['step']} {h['outcome']}: {h.get('detail', '')[:120]}" for h in last)
        lines.append(f"item(s) {lane.get('failed_items')} of {key_of(snap.id)} failed: {said}")
        if len(lines) >= shown:
            break
    return lines


def unsuccessful(db: Any, statuses: dict[str, str], shown: int = 5) -> list[str]:
    """Why flows that did not succeed ended as they did (their result's error and last
    entries), for a few of them: a missed target names its flows."""
    bad = [flow_id for flow_id, status in sorted(statuses.items()) if status != "SUCCEEDED"]
    lines: list[str] = []
    refs = [db.collection("flows").document(document_id(flow_id)) for flow_id in bad[:shown]]
    for snap in db.get_all(refs) if refs else []:
        doc = snap.to_dict() or {}
        error = ((doc.get("result") or {}).get("error")) or {}
        last = [h for h in doc.get("history", [])][-3:]
        said = "; ".join(
            f"{h.get('step')} {h.get('outcome')}: {h.get('detail', '')[:100]}" for h in last
        )
        lines.append(f"{key_of(snap.id)} {doc.get('status')}: {error} | {said}")
    return lines


def wait_cleaned(db: Any, flow_ids: list[str], timeout_s: float) -> dict[str, int]:
    """Once every flow has ended: how many clean-ups ended in each state, once none is
    pending (or ``timeout_s`` runs out); only the flows still cleaning are read again."""
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    left = list(flow_ids)
    while True:
        refs = [db.collection("flows").document(document_id(flow_id)) for flow_id in left]
        for snap in db.get_all(refs):
            cleanup = (snap.to_dict() or {}).get("cleanup") if snap.exists else None
            if cleanup:
                states[key_of(snap.id)] = str(cleanup.get("state"))
        left = [f for f in left if states.get(f) == "pending"]
        if not left or time.monotonic() > deadline:
            counted: dict[str, int] = {}
            for state in states.values():
                counted[state] = counted.get(state, 0) + 1
            return counted
        print(f"    {len(left)} clean-ups pending", flush=True)
        threading.Event().wait(1.0)  # a bench polling Firestore, not a handler


def wait_created(db: Any, flow_ids: list[str], created: threading.Event) -> None:
    """Set ``created`` once every flow's document exists (every start message was taken)."""
    refs = [db.collection("flows").document(document_id(flow_id)) for flow_id in flow_ids]
    while not created.is_set():
        if all(snap.exists for snap in db.get_all(refs)):
            created.set()
            return
        threading.Event().wait(0.5)


def wait_terminal(db: Any, flow_ids: list[str], timeout_s: float) -> dict[str, str]:
    """Each flow's status once all have ended, or when ``timeout_s`` runs out. Only the flows
    not yet ended are read again: reading them all each second would load the emulator the
    stack under test shares."""
    deadline = time.monotonic() + timeout_s
    statuses: dict[str, str] = {}
    left = list(flow_ids)
    shown = -1
    while True:
        refs = [db.collection("flows").document(document_id(flow_id)) for flow_id in left]
        for snap in db.get_all(refs):
            if snap.exists:
                statuses[key_of(snap.id)] = (snap.to_dict() or {}).get("status", "")
        left = [flow_id for flow_id in left if statuses.get(flow_id) not in TERMINAL]
        ended = len(flow_ids) - len(left)
        if ended != shown:  # progress, a line each time it moves
            print(f"    {ended}/{len(flow_ids)} ended", flush=True)
            shown = ended
        if not left or time.monotonic() > deadline:
            return statuses
        threading.Event().wait(1.0)  # a bench polling Firestore, not a handler


def outcome(
    stack: Stack,
    name: str,
    bodies: list[dict[str, Any]],
    statuses: dict[str, str],
    drain_s: float,
    cleanups: dict[str, int],
    fleet_failed: dict[str, set[int]],
) -> Outcome:
    live = client_api(stack, "GET", "/stats?detail=1")["live"]
    by_resource: dict[str, list[str]] = live["registrations_by_resource"]
    entities: dict[str, list[str]] = live["entities_by_registration"]
    live_regs = {reg for regs in by_resource.values() for reg in regs}
    ok = [b for b in bodies if statuses.get(b["flow_id"]) == "SUCCEEDED"]
    # what must be live: a registration for each resource of a flow that succeeded (of a fleet,
    # each item that did not fail: a failed item is undone), and one entity per such flow (a
    # fleet's group entity, on one of its registrations)
    succeeded = {
        r
        for b in ok
        for i, r in enumerate(b["input"].get("resources", [b["input"].get("resource")]))
        if i not in fleet_failed.get(b["flow_id"], set())
    }
    duplicates = sum(len(regs) - 1 for regs in by_resource.values() if len(regs) > 1)
    duplicates += sum(
        len(ids) - 1 for reg, ids in entities.items() if reg in live_regs and len(ids) > 1
    )
    orphans = sum(len(regs) for res, regs in by_resource.items() if res not in succeeded)
    orphans += sum(len(ids) for reg, ids in entities.items() if reg not in live_regs)
    counted: dict[str, int] = {}
    for status in statuses.values():
        counted[status] = counted.get(status, 0) + 1
    return Outcome(
        scenario=name,
        flows=len(bodies),
        terminal=sum(1 for s in statuses.values() if s in TERMINAL),
        succeeded=len(ok),
        statuses=counted,
        live_registrations=len(live_regs),
        expected_registrations=len(succeeded),
        live_entities=sum(len(ids) for ids in entities.values()),
        duplicates=duplicates,
        orphans=orphans,
        drain_s=drain_s,
        cleanups=cleanups,
    )


def table(outcomes: list[Outcome]) -> str:
    names = ("flows", "ended", "stuck", "ok", "regs", "ents")
    head = f"{'scenario':<11} " + " ".join(f"{n:>5}" for n in names)
    head += f" {'dup':>4} {'orph':>4} {'clean d/p/a':>11} {'drain s':>8}  target"
    rows = [head, "-" * len(head)]
    for o in outcomes:
        c = o.cleanups
        cleaned = f"{c.get('done', 0)}/{c.get('pending', 0)}/{c.get('abandoned', 0)}"
        rows.append(
            f"{o.scenario:<11} {o.flows:>5} {o.terminal:>5} {o.stuck:>5} {o.succeeded:>5} "
            f"{o.live_registrations:>5} {o.live_entities:>5} {o.duplicates:>4} {o.orphans:>4} "
            f"{cleaned:>11} {o.drain_s:>8.1f}  "
            f"{'met' if o.ok else 'MISSED ' + json.dumps(o.statuses)}"
        )
    return "\n".join(rows)


# -- the stacks -----------------------------------------------------------------------------------


def stack_for(
    ports: Ports, state_dir: Path, duplicate_rate: float, queue_shards: int | None = None
) -> Stack:
    return Stack(
        ports=ports,
        state_dir=state_dir,
        base_env={**os.environ, **CHAOS_ENV},
        duplicate_rate=duplicate_rate,
        sweep_interval_s=SWEEP_INTERVAL_S,
        queue_shards=queue_shards,
    )


def inner(args: argparse.Namespace) -> int:
    chosen = [s for s in SCENARIOS if s in args.scenarios]
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="relayflow-chaos-") as tmp:
        for duplicate_rate, names in (
            (0.0, [s for s in chosen if s != "duplicates"]),
            (1.0, [s for s in chosen if s == "duplicates"]),
        ):
            if not names:
                continue
            state = Path(tmp) / f"stack-{duplicate_rate}"
            stack = stack_for(Ports(args.base_port), state, duplicate_rate, args.queue_shards)
            where = f"base port {args.base_port}, duplicate rate {duplicate_rate}"
            where += f", queue shards {args.queue_shards or 1}"
            print(f"starting a local stack ({where}) …", flush=True)
            stack.up()
            try:
                for name in names:
                    print(f"  {name}: {args.flows} flows", flush=True)
                    outcomes.append(run_scenario(stack, name, args))
            finally:
                stack.down()
    print(table(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", type=int, default=200)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--pause-s", type=float, default=30.0)
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--base-port", type=int, default=8420)
    parser.add_argument(
        "--queue-shards", type=int, default=None, help="queues of each kind (default: 1)"
    )
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown or not 1 <= args.flows <= 10_000 or args.pause_s <= 0:
        parser.error(f"scenarios from {', '.join(SCENARIOS)}; 1 <= flows <= 10000; pause-s > 0")
    if args.inner:
        return inner(args)
    # The clients in the inner process find the emulators through the environment.
    shards = args.queue_shards
    env = {**os.environ, **relayflow_env(Ports(args.base_port), queue_shards=shards), **CHAOS_ENV}
    argv = [sys.executable, __file__, "--inner", *sys.argv[1:]]
    return subprocess.run(argv, env=env, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
