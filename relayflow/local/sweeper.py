"""The local stack's sweeper: what Cloud Scheduler does in the cloud, on the same schedule.

``python -m relayflow.local.sweeper --interval-s 60`` sweeps once per interval (the first
after one interval) until it is stopped, logging each report. It builds the same runtime as
the worker, so it loads the same ``RELAYFLOW_APP``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Sequence
from types import FrameType

from relayflow.runtime import boot

log = logging.getLogger("relayflow.sweeper")


def run(interval_s: float, stop: threading.Event) -> None:
    """Sweep every ``interval_s`` until ``stop`` is set; one failed sweep never ends it."""
    runtime = boot("relayflow-sweeper")
    grace_s = runtime.settings.sweep_grace_s
    while not stop.wait(interval_s):  # an interruptible wait, not a sleep
        try:
            report = runtime.engine.sweep(grace_s=grace_s)
        except Exception:
            log.exception("sweep failed; trying again next interval")
            continue
        log.info("swept", extra={"report": report.__dict__})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayflow.local.sweeper")
    parser.add_argument("--interval-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.interval_s <= 0:
        parser.error("--interval-s must be > 0")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run(args.interval_s, stop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
