"""The engine with a scripted sender: no dispatch failure may strand a task or its slot.

These run the engine in-process on a real event loop (the retry backoff is tens of ms), so a
sender can raise exactly where aiohttp would, and tasks can be restored as an old --data-dir
holds them (unvalidated).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from cloud_tasks_helpers import seconds

from relayflow.emulators.cloud_tasks import protos as p
from relayflow.emulators.cloud_tasks.clock import SystemClock
from relayflow.emulators.cloud_tasks.codec import with_queue_defaults
from relayflow.emulators.cloud_tasks.dispatch import Dispatcher, Outcome
from relayflow.emulators.cloud_tasks.engine import Engine, EngineSettings
from relayflow.emulators.cloud_tasks.model import Task
from relayflow.emulators.cloud_tasks.oidc import TokenIssuer
from relayflow.emulators.cloud_tasks.stats import Stats
from relayflow.emulators.cloud_tasks.store import MemoryStore, Snapshot
from relayflow.emulators.cloud_tasks.testing import RecordingTarget

if TYPE_CHECKING:
    from relayflow.emulators.cloud_tasks.dispatch import Sender

LOCATION = "projects/p/locations/l"
QUEUE = f"{LOCATION}/queues/q"


class ScriptedSender:
    """Raises for the first `failures` sends (as aiohttp does on a header it cannot send)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def authorize(self, task: Task, headers: dict[str, str]) -> None:
        pass

    async def send(self, task: Task, headers: dict[str, str]) -> Outcome:
        self.calls.append(task.task_id)
        if len(self.calls) <= self.failures:
            raise ValueError("Forbidden control character detected in headers.")
        return Outcome(http_status=200)


class RestoredStore(MemoryStore):
    """A store that hands the engine a queue and tasks at start, as SqliteStore would."""

    def __init__(self, queue: p.Proto, tasks: list[Task]) -> None:
        # As stored: with the service defaults (burst size included) filled in at create.
        self._snapshot = Snapshot(queues=[with_queue_defaults(queue)], tasks=tasks, tombstones=[])

    def load(self) -> Snapshot:
        return self._snapshot


def queue_config(*, max_attempts: int) -> p.Proto:
    return p.QueuePb(
        name=QUEUE,
        state=p.QUEUE_RUNNING,
        rate_limits={"max_dispatches_per_second": 500, "max_concurrent_dispatches": 1},
        retry_config={
            "max_attempts": max_attempts,
            "min_backoff": seconds(0.01),
            "max_backoff": seconds(0.02),
            "max_doublings": 1,
        },
    )


def engine_over(sender: Sender, store: MemoryStore | None = None) -> Engine:
    return Engine(
        clock=SystemClock(),
        store=store or MemoryStore(),
        dispatcher=sender,
        stats=Stats(),
        settings=EngineSettings(),
    )


def create_queue(engine: Engine, *, max_attempts: int) -> None:
    config = queue_config(max_attempts=max_attempts)
    engine.create_queue(p.CreateQueueRequest(parent=LOCATION, queue=config))


def create_task(engine: Engine, task_id: str, url: str = "http://127.0.0.1:9/x") -> None:
    task = p.TaskPb(name=f"{QUEUE}/tasks/{task_id}", http_request={"url": url})
    engine.create_task(p.CreateTaskRequest(parent=QUEUE, task=task))


async def settled(engine: Engine, timeout_s: float = 3.0) -> None:
    """Poll until no task is queued or in flight."""
    async with asyncio.timeout(timeout_s):
        while engine.tasks or engine.in_flight_count():
            await asyncio.sleep(0.005)


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())


def test_a_send_that_raises_is_a_failed_attempt_and_is_retried() -> None:
    sender = ScriptedSender(failures=2)

    async def scenario() -> Engine:
        engine = engine_over(sender)
        await engine.start()
        create_queue(engine, max_attempts=5)
        create_task(engine, "t1")
        await settled(engine)
        await engine.stop(grace_s=1)
        return engine

    engine = run(scenario)

    assert sender.calls == ["t1", "t1", "t1"]
    assert (engine.stats.retried, engine.stats.succeeded, engine.stats.exhausted) == (2, 1, 0)


def test_sends_that_always_raise_exhaust_the_task_and_free_its_slot() -> None:
    sender = ScriptedSender(failures=1_000)

    async def scenario() -> Engine:
        engine = engine_over(sender)
        await engine.start()
        create_queue(engine, max_attempts=2)
        create_task(engine, "first")
        create_task(engine, "second")  # needs the one slot the first task held
        await settled(engine)
        await engine.stop(grace_s=1)
        return engine

    engine = run(scenario)

    assert sorted(sender.calls) == ["first", "first", "second", "second"]
    assert engine.stats.exhausted == 2
    assert engine.in_flight_count() == 0


def test_a_restored_task_with_a_crlf_header_fails_without_blocking_its_queue(
    target: RecordingTarget,
) -> None:
    # The task an older emulator accepted and persisted: aiohttp refuses to send its header.
    poisoned = Task(
        name=f"{QUEUE}/tasks/crlf",
        queue_name=QUEUE,
        url=target.url("/never"),
        http_method=p.HTTP_POST,
        headers=(("X-Bad", "a\r\nX-Injected: 1"),),
        body=b"",
        schedule_time_us=0,
        create_time_us=0,
        dispatch_deadline_us=15_000_000,
    )

    async def scenario() -> Engine:
        async with aiohttp.ClientSession() as session:
            dispatcher = Dispatcher(session, TokenIssuer.generate(), SystemClock())
            store = RestoredStore(queue_config(max_attempts=3), [poisoned])
            engine = engine_over(dispatcher, store)
            await engine.start()
            create_task(engine, "healthy", url=target.url("/healthy"))
            await settled(engine)
            await engine.stop(grace_s=1)
            return engine

    engine = run(scenario)

    assert [hit.path for hit in target.hits_for("/healthy", 1)] == ["/healthy"]
    assert target.no_hit_within(0.1)  # the poisoned task never reached the wire
    assert (engine.stats.exhausted, engine.stats.succeeded, engine.stats.retried) == (1, 1, 2)
