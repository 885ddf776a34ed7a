"""The local stack's sweeper: what Cloud Scheduler does in the cloud, on the same schedule.

``python -m relayflow.local.sweeper --interval-s 60`` sweeps once per interval (the first
after one interval) until it is stopped, logging each report (with the bulk actions' lost
batches it made again, ``BulkRunner.sweep``); each time it also runs the
app's schedules' tick job (the cloud's second scheduler job, ``POST /schedules/tick``), as of
the clock ``--clock-file`` moves (``relayflow.local.clock``). It builds the same runtime as
the worker, so it loads the same ``RELAYFLOW_APP``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from relayflow.core.clock import Clock
from relayflow.core.scheduler import Scheduler
from relayflow.local.clock import OffsetClock
from relayflow.runtime import boot

log = logging.getLogger("relayflow.sweeper")


def run(interval_s: float, stop: threading.Event, clock: Clock | None = None) -> None:
    """Sweep and tick every ``interval_s`` until ``stop`` is set; one failure never ends it."""
    runtime = boot("relayflow-sweeper")
    grace_s = runtime.settings.sweep_grace_s
    scheduler = runtime.scheduler()
    while not stop.wait(interval_s):  # an interruptible wait, not a sleep
        tick(scheduler, clock)
        try:
            report = runtime.engine.sweep(grace_s=grace_s)
            rescued = runtime.bulk_runner().sweep()
        except Exception:
            log.exception("sweep failed; trying again next interval")
            continue
        log.info("swept", extra={"report": report.__dict__, "bulk_batches_rescued": rescued})


def tick(scheduler: Scheduler, clock: Clock | None) -> None:
    """Run the schedules' tick job once, as of ``clock`` (the wall clock's when None)."""
    try:
        report = scheduler.tick(clock.now() if clock is not None else None)
    except Exception:
        log.exception("schedules' tick failed; trying again next interval")
        return
    if report.started or report.errors:
        log.info("ticked", extra={"report": report.to_dict()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayflow.local.sweeper")
    parser.add_argument("--interval-s", type=float, default=60.0)
    parser.add_argument("--clock-file", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.interval_s <= 0:
        parser.error("--interval-s must be > 0")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run(args.interval_s, stop, OffsetClock(args.clock_file) if args.clock_file else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
