"""relayflow/emulators/cloud_tasks/dispatch.py: headers, Retry-After, and the dispatch deadline."""

from __future__ import annotations

import asyncio
import email.utils

import aiohttp
from aiohttp import web

from relayflow.emulators.cloud_tasks.clock import FakeClock, SystemClock
from relayflow.emulators.cloud_tasks.dispatch import Dispatcher, dispatch_headers, retry_after_us
from relayflow.emulators.cloud_tasks.model import Task
from relayflow.emulators.cloud_tasks.oidc import TokenIssuer

Q = "projects/p/locations/l/queues/q1"


def task(**fields: object) -> Task:
    values: dict[str, object] = {
        "name": f"{Q}/tasks/t1",
        "queue_name": Q,
        "url": "http://127.0.0.1:1/x",
        "http_method": 1,
        "headers": (),
        "body": b"",
        "schedule_time_us": 1_700_000_000_250_000,
        "create_time_us": 1_700_000_000_000_000,
        "dispatch_deadline_us": 600_000_000,
    }
    values.update(fields)
    return Task(**values)  # type: ignore[arg-type]


def test_first_attempt_headers() -> None:
    headers = dispatch_headers(
        task(body=b"x", headers=(("Host", "evil"), ("X-CloudTasks-TaskName", "spoof"), ("A", "b"))),
        execution_count=0,
    )

    assert headers == {
        "A": "b",
        "Content-Type": "application/octet-stream",
        "User-Agent": "Google-Cloud-Tasks",
        "X-CloudTasks-QueueName": "q1",
        "X-CloudTasks-TaskName": "t1",
        "X-CloudTasks-TaskRetryCount": "0",
        "X-CloudTasks-TaskExecutionCount": "0",
        "X-CloudTasks-TaskETA": "1700000000.250000",
    }


def test_retry_headers_name_the_previous_response() -> None:
    retried = task(dispatch_count=2, previous_response=503, retry_reason="HTTP 503")

    headers = dispatch_headers(retried, execution_count=1)

    assert headers["X-CloudTasks-TaskRetryCount"] == "2"
    assert headers["X-CloudTasks-TaskExecutionCount"] == "1"
    assert headers["X-CloudTasks-TaskPreviousResponse"] == "503"
    assert headers["X-CloudTasks-TaskRetryReason"] == "HTTP 503"


def test_retry_after_in_seconds_or_as_a_date() -> None:
    clock = FakeClock()
    when = email.utils.formatdate(clock.now_us() / 1e6 + 30, usegmt=True)

    assert retry_after_us("2", clock.now_us()) == 2_000_000
    assert retry_after_us(when, clock.now_us()) == 30_000_000
    assert retry_after_us("soon", clock.now_us()) == 0
    assert retry_after_us(None, clock.now_us()) == 0


def test_a_response_slower_than_the_deadline_is_a_failed_attempt() -> None:
    async def scenario() -> tuple[int, str]:
        async def slow(request: web.Request) -> web.Response:
            await asyncio.sleep(1)
            return web.Response()

        app = web.Application()
        app.router.add_post("/slow", slow)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                dispatcher = Dispatcher(session, TokenIssuer.generate(), SystemClock())
                slow_task = task(url=f"http://127.0.0.1:{port}/slow", dispatch_deadline_us=200_000)
                outcome = await dispatcher.send(slow_task, {})
        finally:
            await runner.cleanup()
        return outcome.http_status, outcome.error

    assert asyncio.run(scenario()) == (0, "deadline exceeded")
