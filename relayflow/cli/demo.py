"""The demo batch: a mix of flows that succeed, fail, time out, and messages that are refused.

It shows progress while the batch runs and ends with a summary table: flows by status, polls
per flow, and p50/p95 flow duration.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass

import requests
from google.cloud.pubsub_v1 import SubscriberClient

from relayflow.cli.batch import BatchReport, Planned, ResultWatcher, percentile, run_batch
from relayflow.core.engine import safe_id
from relayflow.gcp.events import Events, build_publisher
from relayflow.gcp.store import FlowStore, build_client
from relayflow.settings import Settings
from relayflow.topology import load_topology

TIMEOUT_DEADLINE_S = 6.0
MALFORMED: tuple[bytes, ...] = (b"not json at all", b'{"flow": "registration"}')


@dataclass(frozen=True)
class DemoPlan:
    planned: list[Planned]
    slow_resources: list[str]


def plan_demo(run: str, flows: int) -> DemoPlan:
    """Mostly normal flows; every 12th is a business rejection, every 12th (offset) too slow."""
    planned: list[Planned] = []
    slow: list[str] = []
    for i in range(flows):
        flow_id = f"demo-{run}-{i:04d}"
        body: dict[str, object] = {"flow": "registration", "flow_id": flow_id}
        if i % 12 == 5:
            body["input"] = {"resource": f"reject-{run}-{i}"}
        elif i % 12 == 11:
            resource = f"slow-{run}-{i}"
            slow.append(resource)
            body["input"] = {"resource": resource}
            body["deadline_s"] = TIMEOUT_DEADLINE_S
        else:
            body["input"] = {"resource": f"acme-{run}-{i}"}
        planned.append(Planned(flow_id=flow_id, body=body))
    planned.extend(Planned(flow_id=None, body=raw) for raw in MALFORMED)
    return DemoPlan(planned, slow)


def progress_line(done: int, total: int, elapsed_s: float) -> None:
    """A progress bar redrawn in place on a terminal; a plain line per update otherwise."""
    if not sys.stdout.isatty():
        print(f"  {done}/{total} flows ended  {elapsed_s:5.1f}s", flush=True)
        return
    width = 30
    filled = int(width * done / total) if total else width
    bar = "#" * filled + "." * (width - filled)
    sys.stdout.write(f"\r  [{bar}] {done}/{total} flows ended  {elapsed_s:5.1f}s")
    sys.stdout.flush()


def summary(report: BatchReport, rejected_found: int) -> str:
    """The closing table of a batch."""
    durations = report.durations_s()
    polls = [r.polls for r in report.records]
    sent_bad = len(report.malformed_ids)
    rows = [("flows published", str(report.published - sent_bad))]
    rows += [(f"  {status}", str(n)) for status, n in sorted(report.by_status().items())]
    rows += [
        ("  never created", str(len(report.missing))),
        ("malformed messages sent", str(sent_bad)),
        ("  recorded in 'rejected'", str(rejected_found)),
        ("polls per flow (mean/max)", f"{_mean(polls):.1f} / {max(polls, default=0)}"),
        ("flow run time p50", f"{percentile(durations, 50):.2f} s"),
        ("flow run time p95", f"{percentile(durations, 95):.2f} s"),
        ("publish-to-end p95", f"{percentile(report.latencies_s(), 95):.2f} s"),
        ("batch wall time", f"{report.elapsed_s:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows) + 2
    line = "-" * (width + 14)
    return "\n".join([line, *(f"{k:<{width}}{v:>12}" for k, v in rows), line])


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def run_demo(settings: Settings, *, flows: int, timeout_s: float) -> int:
    """Run the demo batch against the stack ``settings`` points at; 0 if every flow ended."""
    topology = load_topology()
    run = uuid.uuid4().hex[:6]
    plan = plan_demo(run, flows)
    _configure_client_api(str(settings.client_api_url), plan.slow_resources)
    names = topology.firestore
    store = FlowStore(
        build_client(settings), flows=names.flows_collection, rejected=names.rejected_collection
    )
    events = Events(build_publisher(), project=settings.project_id)
    watcher = ResultWatcher(SubscriberClient(), settings.project_id, topology.topics.results)
    print(f"demo run {run}: {flows} flows + {len(MALFORMED)} malformed messages")
    try:
        report = run_batch(
            plan.planned,
            events=events,
            store=store,
            watcher=watcher,
            topic=topology.topics.requests,
            timeout_s=timeout_s,
            progress=progress_line,
        )
    finally:
        watcher.close()
    print()
    rejected = sum(1 for m in report.malformed_ids if store.rejected(safe_id(m)) is not None)
    print(summary(report, rejected))
    print("inspect one:  relayflow status", plan.planned[0].flow_id)
    unfinished = [r.flow_id for r in report.records if r.finished_at is None] + report.missing
    if unfinished:
        print(f"not finished within {timeout_s:.0f}s: {', '.join(unfinished[:10])}")
    return 1 if unfinished else 0


def _configure_client_api(base_url: str, slow: list[str]) -> None:
    """Make the demo's slow registrations never activate, so those flows time out."""
    config = {"resource_delays": dict.fromkeys(slow)}
    response = requests.post(f"{base_url.rstrip('/')}/admin/config", json=config, timeout=10)
    response.raise_for_status()


__all__ = ["plan_demo", "run_demo", "summary"]
