"""The demo batch: the app's mix of flows (its ``demo_batch``) and messages that are refused.

It shows progress while the batch runs and ends with a summary table: flows by status, polls
per flow, and p50/p95 flow duration.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Callable
from typing import Any, cast

from google.cloud.pubsub_v1 import SubscriberClient

from relayflow.cli import render
from relayflow.cli.batch import BatchReport, Planned, ResultWatcher, percentile, run_batch
from relayflow.core.engine import safe_id
from relayflow.core.errors import ConfigError
from relayflow.gcp.events import Events, build_publisher
from relayflow.gcp.store import FlowStore, build_client
from relayflow.settings import Settings
from relayflow.topology import load_topology

MALFORMED: tuple[bytes, ...] = (b"not json at all", b'{"flow": "no-such-flow", "input": {}}')
DEMO_HOOK = "demo_batch"

# What an app's module defines to be run by ``relayflow demo``: the start messages of a batch
# of ``flows`` flows for run ``run`` (each with a ``flow_id``), after configuring whatever fake
# dependency the batch needs (e.g. which resources never activate).
DemoBatch = Callable[[str, int, Settings], list[dict[str, Any]]]


def load_demo(target: str) -> DemoBatch:
    """The ``demo_batch`` function of the module an app target names."""
    module_name = target.partition(":")[0]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"RELAYFLOW_APP={target!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    hook = getattr(module, DEMO_HOOK, None)
    if not callable(hook):
        raise ConfigError(
            f"RELAYFLOW_APP={target!r}: module {module_name!r} has no {DEMO_HOOK}(run, flows, "
            "settings) function returning the start messages of a demo batch"
        )
    return cast(DemoBatch, hook)


def plan_demo(bodies: list[dict[str, Any]]) -> list[Planned]:
    """The batch's flows, then the malformed messages every demo sends."""
    planned = [Planned(flow_id=str(body["flow_id"]), body=body) for body in bodies]
    return planned + [Planned(flow_id=None, body=raw) for raw in MALFORMED]


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
    rows += [(f"  {render.text(s)}", str(n)) for s, n in sorted(report.by_status().items())]
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
    """Run the app's demo batch against the stack ``settings`` points at; 0 if every flow
    ended."""
    topology = load_topology()
    run = uuid.uuid4().hex[:6]
    planned = plan_demo(load_demo(settings.app)(run, flows, settings))
    names = topology.firestore
    store = FlowStore(
        build_client(settings), flows=names.flows_collection, rejected=names.rejected_collection
    )
    events = Events(build_publisher(), project=settings.project_id)
    watcher = ResultWatcher(SubscriberClient(), settings.project_id, topology.topics.results)
    print(f"demo run {run}: {flows} flows + {len(MALFORMED)} malformed messages")
    try:
        report = run_batch(
            planned,
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
    print("inspect one:  relayflow status", render.text(planned[0].flow_id))
    unfinished = [r.flow_id for r in report.records if r.finished_at is None] + report.missing
    if unfinished:
        shown = render.text(", ".join(unfinished[:10]))
        print(f"not finished within {timeout_s:.0f}s: {shown}")
    return 1 if unfinished else 0


__all__ = ["DemoBatch", "load_demo", "plan_demo", "run_demo", "summary"]
