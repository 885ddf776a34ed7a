"""Cloud Tasks emulator benchmark: dispatch lag at 500 tasks/s, and RSS with 100,000 tasks.

    .venv/bin/python bench/cloud_tasks_dispatch.py [--rate 500] [--seconds 20] [--tasks 100000]

Lag is measured at the target: arrival time minus the task's X-CloudTasks-TaskETA (its
schedule_time). Tasks are created while others are being dispatched, each scheduled 0.5 s
after its creation, so the emulator is taking API calls and dispatching at the same time.
Targets: p99 <= 25 ms; peak RSS <= 300 MB with 100,000 scheduled tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import web
from grpc import aio

from relayflow.emulators.cloud_tasks import protos as p
from relayflow.emulators.cloud_tasks.testing import EmulatorProcess, free_port

LOCATION = "projects/bench/locations/us-central1"
BODY = (
    b'{"flow_id": "f-0000000000", "step": "poll", "attempt": 1, "payload": "' + b"x" * 120 + b'"}'
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class Target:
    """A local 2xx endpoint that records each task's lag (run in its own process)."""

    def __init__(self) -> None:
        self.lags_ms: list[float] = []

    async def handle(self, request: web.Request) -> web.Response:
        arrived = time.time()
        await request.read()
        self.lags_ms.append((arrived - float(request.headers["X-CloudTasks-TaskETA"])) * 1000)
        return web.Response(status=204)

    async def report(self, request: web.Request) -> web.Response:
        return web.json_response(self.lags_ms)

    def serve(self, port: int) -> None:
        app = web.Application()
        app.router.add_post("/task", self.handle)
        app.router.add_get("/report", self.report)
        web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def start_target() -> tuple[multiprocessing.Process, int]:
    port = free_port()
    process = multiprocessing.Process(target=Target().serve, args=(port,), daemon=True)
    process.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/report").close()
            return process, port
        except OSError:
            time.sleep(0.05)
    raise TimeoutError("target did not start")


def target_lags(port: int) -> list[float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/report") as response:
        lags: list[float] = json.loads(response.read())
        return lags


def stubs(channel: aio.Channel) -> tuple[Any, Any]:
    service = "/google.cloud.tasks.v2.CloudTasks/"
    create_queue = channel.unary_unary(
        service + "CreateQueue",
        request_serializer=p.CreateQueueRequest.SerializeToString,
        response_deserializer=p.QueuePb.FromString,
    )
    create_task = channel.unary_unary(
        service + "CreateTask",
        request_serializer=p.CreateTaskRequest.SerializeToString,
        response_deserializer=p.TaskPb.FromString,
    )
    return create_queue, create_task


def task_request(queue: str, url: str, schedule_s: float) -> Any:
    request = p.CreateTaskRequest(parent=queue)
    request.task.http_request.url = url
    request.task.http_request.body = BODY
    request.task.http_request.headers["Content-Type"] = "application/json"
    request.task.schedule_time.FromMicroseconds(round(schedule_s * 1_000_000))
    return request


async def lag_run(emulator: EmulatorProcess, rate: int, seconds: float) -> dict[str, Any]:
    target, port = start_target()
    url = f"http://127.0.0.1:{port}/task"
    async with aio.insecure_channel(emulator.grpc_target) as channel:
        create_queue, create_task = stubs(channel)
        queue = f"{LOCATION}/queues/lag"
        await create_queue(p.CreateQueueRequest(parent=LOCATION, queue=p.QueuePb(name=queue)))
        total = int(rate * seconds)
        start = time.time() + 0.5
        jobs: list[asyncio.Task[Any]] = []
        for i in range(total):
            due = start + i / rate
            # Create each task 0.5 s before it is due, so creation and dispatch overlap.
            delay = due - 0.5 - time.time()
            if delay > 0.01:
                await asyncio.sleep(delay)
            jobs.append(asyncio.ensure_future(create_task(task_request(queue, url, due))))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        failed = sum(isinstance(r, BaseException) for r in results)
        deadline = time.time() + 10
        while len(lags := target_lags(port)) < total - failed and time.time() < deadline:
            await asyncio.sleep(0.2)
    target.terminate()
    return {
        "delivered": len(lags),
        "expected": total,
        "create_failures": failed,
        "emulator_side": emulator_lag(emulator),
        "p50_ms": percentile(lags, 0.50),
        "p99_ms": percentile(lags, 0.99),
        "max_ms": max(lags),
    }


def emulator_lag(emulator: EmulatorProcess) -> Any:
    """The emulator's own view (dispatch start minus schedule_time), from GET /stats."""
    with urllib.request.urlopen(f"{emulator.rest_url}/stats") as response:
        return json.loads(response.read())["dispatch_lag_ms"]


def peak_rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


async def memory_run(emulator: EmulatorProcess, count: int) -> dict[str, float]:
    async with aio.insecure_channel(emulator.grpc_target) as channel:
        create_queue, create_task = stubs(channel)
        queue = f"{LOCATION}/queues/mem"
        await create_queue(p.CreateQueueRequest(parent=LOCATION, queue=p.QueuePb(name=queue)))
        baseline = peak_rss_mb(emulator.process.pid)[0]
        later = time.time() + 3600
        started = time.monotonic()
        batch = 200
        for offset in range(0, count, batch):
            await asyncio.gather(
                *(
                    create_task(task_request(queue, "http://127.0.0.1:9/never", later + i / 1000))
                    for i in range(offset, min(count, offset + batch))
                )
            )
        elapsed = time.monotonic() - started
    rss, peak = peak_rss_mb(emulator.process.pid)
    return {
        "tasks": count,
        "baseline_rss_mb": baseline,
        "rss_mb": rss,
        "peak_rss_mb": peak,
        "create_per_s": count / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tasks", type=int, default=100_000)
    args = parser.parse_args()

    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    with EmulatorProcess.start() as emulator:
        lag = asyncio.run(lag_run(emulator, args.rate, args.seconds))
    print(
        f"dispatch lag at {args.rate} tasks/s for {args.seconds:g} s "
        f"({lag['delivered']:.0f}/{lag['expected']:.0f} delivered): "
        f"p50 {lag['p50_ms']:.1f} ms, p99 {lag['p99_ms']:.1f} ms, max {lag['max_ms']:.1f} ms "
        f"(target p99 <= 25 ms); emulator-side p50 {lag['emulator_side']['p50']} ms, "
        f"p99 {lag['emulator_side']['p99']} ms; create failures {lag['create_failures']}; "
        f"load average before the run {load_before}"
    )
    with EmulatorProcess.start() as emulator:
        mem = asyncio.run(memory_run(emulator, args.tasks))
    print(
        f"memory with {mem['tasks']:.0f} scheduled tasks: peak RSS {mem['peak_rss_mb']:.0f} MB "
        f"(RSS {mem['rss_mb']:.0f} MB, idle {mem['baseline_rss_mb']:.0f} MB; "
        f"created at {mem['create_per_s']:.0f}/s) (target <= 300 MB)"
    )


if __name__ == "__main__":
    main()
