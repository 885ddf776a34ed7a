"""The one engine behind both front doors: queues, tasks, dedup, scheduling and retries.

Everything runs on one asyncio event loop, so state needs no locks. API methods are plain
(synchronous) functions taking and returning protobuf messages; dispatching happens in one
coroutine per queue, woken by an asyncio.Event whenever something earlier may be due.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from relayflow.emulators.cloud_tasks import validation as v
from relayflow.emulators.cloud_tasks.clock import US_PER_S, Clock
from relayflow.emulators.cloud_tasks.codec import task_to_pb, with_queue_defaults
from relayflow.emulators.cloud_tasks.dispatch import Outcome, Sender, dispatch_headers, drain
from relayflow.emulators.cloud_tasks.errors import AlreadyExists, InvalidArgument, NotFound
from relayflow.emulators.cloud_tasks.model import Attempt, Task
from relayflow.emulators.cloud_tasks.paging import page
from relayflow.emulators.cloud_tasks.protos import (
    HTTP_POST,
    QUEUE_PAUSED,
    QUEUE_RUNNING,
    FieldMask,
    ListQueuesResponse,
    ListTasksResponse,
    Proto,
    QueuePb,
)
from relayflow.emulators.cloud_tasks.queue import QueueRuntime
from relayflow.emulators.cloud_tasks.retry import next_attempt_delay_us, should_retry
from relayflow.emulators.cloud_tasks.stats import Stats
from relayflow.emulators.cloud_tasks.store import Store

log = logging.getLogger(__name__)

QUEUE_DESCRIPTOR = QueuePb.DESCRIPTOR

_PRUNE_EVERY_S = 60.0
# google.rpc.Code for an attempt that got no response / hit its deadline.
_UNAVAILABLE = 14
_DEADLINE_EXCEEDED = 4
# A duplicate delivery starts this long after the first at most: soon enough to overlap it.
_DUPLICATE_SPREAD_S = 0.05


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The knobs the command line sets."""

    tombstone_window_us: int = 86_400 * US_PER_S
    duplicate_rate: float = 0.0
    seed: int | None = None


class Engine:
    """Queues and tasks, their API, and their dispatch."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: Store,
        dispatcher: Sender,
        stats: Stats,
        settings: EngineSettings,
    ) -> None:
        self._clock = clock
        self._store = store
        self._dispatcher = dispatcher
        self.stats = stats
        self._settings = settings
        self._rng = random.Random(settings.seed)
        self.queues: dict[str, QueueRuntime] = {}
        self.tasks: dict[str, Task] = {}
        # name -> expiry; insertion order is expiry order because the window is fixed.
        self._tombstones: OrderedDict[str, int] = OrderedDict()
        self._seq = itertools.count(1)
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._pruner: asyncio.Task[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Reload persisted state and start dispatching."""
        snapshot = self._store.load()
        now = self._clock.now_us()
        for config in snapshot.queues:
            self._add_queue(config, now)
        for name, expires_us in snapshot.tombstones:
            self._tombstones[name] = expires_us
        for task in snapshot.tasks:
            queue = self.queues.get(task.queue_name)
            if queue is not None:
                self._insert(queue, task)
        self._pruner = asyncio.create_task(self._prune_forever())
        log.info("engine started: %d queues, %d tasks", len(self.queues), len(self.tasks))

    async def stop(self, *, grace_s: float) -> None:
        """Stop dispatching, let in-flight attempts finish (or record them), keep state."""
        for loop_task in [*self._loops.values(), self._pruner]:
            if loop_task is not None:
                loop_task.cancel()
        pending = await drain(self._in_flight, grace_s)
        for attempt in pending:
            # A cancelled attempt records itself as failed, so it is retried after a restart.
            attempt.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._store.close()

    def in_flight_count(self) -> int:
        return sum(q.in_flight for q in self.queues.values())

    # ---- queues ----------------------------------------------------------------------

    def create_queue(self, request: Proto) -> Proto:
        parent = v.location_of(request.parent)
        queue = request.queue
        if not queue.name:
            raise InvalidArgument("Queue.name is required")
        queue_parent, _ = v.split_queue_name(queue.name)
        if queue_parent != parent:
            raise InvalidArgument(
                f"Queue.name {queue.name!r} is not in the parent location {parent!r}"
            )
        if queue.name in self.queues:
            raise AlreadyExists(f"Queue {queue.name} already exists")
        return self._put_new_queue(queue)

    def get_queue(self, request: Proto) -> Proto:
        return self._queue(request.name).config

    def list_queues(self, request: Proto) -> Proto:
        parent = v.location_of(request.parent)
        size = v.page_size(request.page_size, v.MAX_PAGE_SIZE_QUEUES)
        wanted_state = _state_filter(request.filter)
        prefix = parent + "/queues/"
        names = sorted(
            name
            for name, queue in self.queues.items()
            if name.startswith(prefix) and wanted_state in (0, queue.config.state)
        )
        chunk, token = page(names, size=size, token=request.page_token)
        response = ListQueuesResponse(next_page_token=token)
        response.queues.extend(self.queues[name].config for name in chunk)
        return response

    def update_queue(self, request: Proto) -> Proto:
        """Update the fields named in update_mask (all if empty); create the queue if missing."""
        incoming = request.queue
        v.split_queue_name(incoming.name)
        existing = self.queues.get(incoming.name)
        if existing is None:
            return self._put_new_queue(_masked(QueuePb(name=incoming.name), request))
        config = with_queue_defaults(_masked(existing.config, request))
        config.state = existing.config.state
        config.purge_time.CopyFrom(existing.config.purge_time)
        if not existing.config.HasField("purge_time"):
            config.ClearField("purge_time")
        v.check_queue_config(config)
        existing.reconfigure(config, now_us=self._clock.now_us())
        self._store.put_queue(config)
        return config

    def delete_queue(self, request: Proto) -> None:
        queue = self._queue(request.name)
        del self.queues[queue.name]
        self._loops.pop(queue.name).cancel()
        for task in queue.tasks.values():
            task.live = False
            del self.tasks[task.name]
        self._store.delete_queue(queue.name)

    def pause_queue(self, request: Proto) -> Proto:
        return self._set_state(request.name, QUEUE_PAUSED)

    def resume_queue(self, request: Proto) -> Proto:
        return self._set_state(request.name, QUEUE_RUNNING)

    def purge_queue(self, request: Proto) -> Proto:
        """Delete every task created before now."""
        queue = self._queue(request.name)
        now = self._clock.now_us()
        for task in [t for t in queue.tasks.values() if t.create_time_us <= now]:
            self._retire(queue, task)
        queue.config.purge_time.FromMicroseconds(now)
        self._store.put_queue(queue.config)
        return queue.config

    # ---- tasks -----------------------------------------------------------------------

    def create_task(self, request: Proto) -> Proto:
        queue = self._queue(request.parent)
        now = self._clock.now_us()
        name, named = self._task_name(request)
        task = _new_task(request.task, queue_name=queue.name, name=name, now_us=now)
        task.named = named
        self._insert(queue, task)
        self._store.put_task(task)
        self.stats.created += 1
        return task_to_pb(task, view=request.response_view)

    def get_task(self, request: Proto) -> Proto:
        return task_to_pb(self._task(request.name), view=request.response_view)

    def list_tasks(self, request: Proto) -> Proto:
        queue = self._queue(request.parent)
        size = v.page_size(request.page_size, v.MAX_PAGE_SIZE_TASKS)
        chunk, token = page(sorted(queue.tasks), size=size, token=request.page_token)
        response = ListTasksResponse(next_page_token=token)
        view = request.response_view
        response.tasks.extend(task_to_pb(queue.tasks[name], view=view) for name in chunk)
        return response

    def delete_task(self, request: Proto) -> None:
        task = self._task(request.name)
        self._retire(self.queues[task.queue_name], task)

    def run_task(self, request: Proto) -> Proto:
        """Dispatch now, ignoring pause and rate limits (an attempt already running stands)."""
        task = self._task(request.name)
        if not task.running:
            self._dispatch(self.queues[task.queue_name], task, forced=True)
        return task_to_pb(task, view=request.response_view)

    # ---- bookkeeping -----------------------------------------------------------------

    def _put_new_queue(self, queue: Proto) -> Proto:
        config = with_queue_defaults(queue)
        config.state = QUEUE_RUNNING
        config.ClearField("purge_time")
        v.check_queue_config(config)
        self._add_queue(config, self._clock.now_us())
        self._store.put_queue(config)
        return config

    def _add_queue(self, config: Proto, now_us: int) -> None:
        queue = QueueRuntime(config, now_us=now_us)
        self.queues[queue.name] = queue
        self._loops[queue.name] = asyncio.create_task(self._run_queue(queue))

    def _queue(self, name: str) -> QueueRuntime:
        v.split_queue_name(name)
        queue = self.queues.get(name)
        if queue is None:
            raise NotFound(f"Queue {name} does not exist")
        return queue

    def _task(self, name: str) -> Task:
        v.split_task_name(name)
        task = self.tasks.get(name)
        if task is None:
            raise NotFound(f"Task {name} does not exist (it may have run or been deleted)")
        return task

    def _task_name(self, request: Proto) -> tuple[str, bool]:
        """The task's name and whether the client chose it; refuses names seen too recently."""
        name: str = request.task.name
        if not name:
            return f"{request.parent}/tasks/{self._rng.randrange(10**19, 10**20)}", False
        queue_name, _ = v.split_task_name(name)
        if queue_name != request.parent:
            raise InvalidArgument(
                f"Task.name {name!r} is not in the parent queue {request.parent!r}"
            )
        if name in self.tasks:
            raise AlreadyExists(f"Requested entity already exists: task {name}")
        if self._tombstone_alive(name):
            raise AlreadyExists(
                f"The task cannot be created because a task with this name existed too "
                f"recently: {name}"
            )
        return name, True

    def _tombstone_alive(self, name: str) -> bool:
        expires = self._tombstones.get(name)
        return expires is not None and expires > self._clock.now_us()

    def _insert(self, queue: QueueRuntime, task: Task) -> None:
        self.tasks[task.name] = task
        queue.tasks[task.name] = task
        queue.schedule(task, next(self._seq))

    def _set_state(self, name: str, state: int) -> Proto:
        queue = self._queue(name)
        queue.config.state = state
        queue.wake.set()
        self._store.put_queue(queue.config)
        return queue.config

    def _retire(self, queue: QueueRuntime, task: Task) -> None:
        """Forget a finished, exhausted, deleted or purged task and reserve its name."""
        task.live = False
        self.tasks.pop(task.name, None)
        queue.tasks.pop(task.name, None)
        self._store.delete_task(task.name)
        window = self._settings.tombstone_window_us
        if task.named and window > 0:
            expires = self._clock.now_us() + window
            self._tombstones[task.name] = expires
            self._tombstones.move_to_end(task.name)
            self._store.put_tombstone(task.name, expires)

    async def _prune_forever(self) -> None:
        while True:
            await asyncio.sleep(_PRUNE_EVERY_S)
            self._prune_tombstones()

    def _prune_tombstones(self) -> None:
        now = self._clock.now_us()
        while self._tombstones:
            expires = next(iter(self._tombstones.values()))
            if expires > now:
                break
            self._tombstones.popitem(last=False)
        self._store.prune_tombstones(now)

    # ---- dispatch --------------------------------------------------------------------

    async def _run_queue(self, queue: QueueRuntime) -> None:
        """Dispatch the queue's due tasks, never early, within its rate limits."""
        while True:
            queue.wake.clear()
            delay_us = queue.next_delay_us(self._clock.now_us())
            if delay_us == 0:
                self._dispatch(queue, queue.pop(), forced=False)
                continue
            timeout_s = None if delay_us is None else delay_us / US_PER_S
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await queue.wake.wait()

    def _dispatch(self, queue: QueueRuntime, task: Task, *, forced: bool) -> None:
        now = self._clock.now_us()
        if not forced:
            queue.bucket.take(now)
            self.stats.record_lag(now - task.schedule_time_us)
        headers = dispatch_headers(task, execution_count=task.execution_count)
        attempt = Attempt(schedule_time_us=task.schedule_time_us, dispatch_time_us=now)
        task.running = True
        task.dispatch_count += 1
        task.first_dispatch_us = task.first_dispatch_us or now
        queue.in_flight += 1
        self.stats.dispatched += 1
        self.stats.dispatched_by_queue[queue.name.rpartition("/")[2]] += 1
        self._spawn(self._attempt(queue, task, attempt, headers))
        rate = self._settings.duplicate_rate
        if rate and self._rng.random() < rate:
            self.stats.duplicated += 1
            offset_s = self._rng.uniform(0.0, _DUPLICATE_SPREAD_S)
            self._spawn(self._duplicate(task, headers, offset_s))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        job = asyncio.ensure_future(coro)
        self._in_flight.add(job)
        job.add_done_callback(self._in_flight.discard)

    async def _attempt(
        self, queue: QueueRuntime, task: Task, attempt: Attempt, headers: dict[str, str]
    ) -> None:
        """One attempt; whatever happens, it ends in _finish, which frees the concurrency slot."""
        try:
            outcome = await self._deliver(task, headers)
        except asyncio.CancelledError:
            self._finish(queue, task, attempt, Outcome(0, error="emulator stopped"))
            raise
        except Exception as exc:
            # A request the HTTP client cannot even send is a failed attempt like any other,
            # retried per the queue's RetryConfig; it must never strand the task or its slot.
            log.exception("attempt of %s could not be sent", task.name)
            # Only the class name: the reason is echoed in the next attempt's headers.
            outcome = Outcome(0, error=f"dispatch failed: {type(exc).__name__}")
        self._finish(queue, task, attempt, outcome)

    async def _duplicate(self, task: Task, headers: dict[str, str], offset_s: float) -> None:
        """A second delivery of the same attempt, as the service may make, overlapping the
        first (it starts within _DUPLICATE_SPREAD_S of it). Its outcome is moot, and it holds
        no concurrency slot: it is the same task in dispatch, not another one."""
        await asyncio.sleep(offset_s)
        try:
            await self._deliver(task, headers)
        except Exception:
            log.exception("duplicate delivery of %s could not be sent", task.name)

    async def _deliver(self, task: Task, headers: dict[str, str]) -> Outcome:
        """Send one request; each delivery gets its own copy of the headers and its own token."""
        own_headers = dict(headers)
        self._dispatcher.authorize(task, own_headers)
        return await self._dispatcher.send(task, own_headers)

    def _finish(self, queue: QueueRuntime, task: Task, attempt: Attempt, outcome: Outcome) -> None:
        now = self._clock.now_us()
        queue.in_flight -= 1
        queue.wake.set()
        task.running = False
        _record(task, attempt, outcome, now)
        if not task.live:
            return
        if outcome.succeeded:
            self.stats.succeeded += 1
            self._retire(queue, task)
        elif should_retry(
            policy=queue.policy,
            dispatch_count=task.dispatch_count,
            first_attempt_us=task.first_dispatch_us,
            now_us=now,
        ):
            self._reschedule(queue, task, outcome, now)
        else:
            self.stats.exhausted += 1
            self._retire(queue, task)

    def _reschedule(self, queue: QueueRuntime, task: Task, outcome: Outcome, now: int) -> None:
        delay = next_attempt_delay_us(
            policy=queue.policy,
            dispatch_count=task.dispatch_count,
            retry_after_us=outcome.retry_after_us,
        )
        task.schedule_time_us = now + delay
        queue.schedule(task, next(self._seq))
        self._store.put_task(task)
        self.stats.retried += 1


def _record(task: Task, attempt: Attempt, outcome: Outcome, now_us: int) -> None:
    """Fold an attempt's outcome into the task's counters and its retry headers."""
    task.last_attempt = attempt
    attempt.response_time_us = now_us
    if outcome.http_status:
        task.response_count += 1
        if outcome.http_status < 500:
            task.execution_count += 1
        task.previous_response = outcome.http_status
        task.retry_reason = "" if outcome.succeeded else f"HTTP {outcome.http_status}"
        attempt.status_code = _rpc_code(outcome.http_status)
        attempt.status_message = f"HTTP status code {outcome.http_status}"
    else:
        task.previous_response = 0
        task.retry_reason = outcome.error
        attempt.status_code = _DEADLINE_EXCEEDED if "deadline" in outcome.error else _UNAVAILABLE
        attempt.status_message = outcome.error


_HTTP_TO_RPC = {400: 9, 401: 16, 403: 7, 404: 5, 409: 10, 429: 8, 499: 1, 501: 12, 503: 14, 504: 4}


def _rpc_code(http_status: int) -> int:
    """google.rpc.Code for an HTTP status, as Google's HTTP mapping pairs them."""
    if 200 <= http_status < 300:
        return 0
    return _HTTP_TO_RPC.get(http_status, 13 if http_status >= 500 else 9)


def _masked(base: Proto, request: Proto) -> Proto:
    """`base` with the request's queue fields applied per update_mask (all fields if empty)."""
    if not request.update_mask.paths:
        out = QueuePb()
        out.CopyFrom(request.queue)
        return out
    _check_mask_paths(request.update_mask.paths)
    out = QueuePb()
    out.CopyFrom(base)
    try:
        request.update_mask.MergeMessage(request.queue, out, replace_message_field=True)
    except ValueError as exc:
        raise InvalidArgument(f"Invalid update_mask: {exc}") from exc
    return out


def _check_mask_paths(paths: Sequence[str]) -> None:
    """Refuse paths that name no Queue field (MergeMessage raises KeyError for some, and
    silently ignores others)."""
    unknown = [
        path for path in paths if not FieldMask(paths=[path]).IsValidForDescriptor(QUEUE_DESCRIPTOR)
    ]
    if unknown:
        names = ", ".join(repr(p) for p in unknown)
        raise InvalidArgument(f"Invalid update_mask: no such field of Queue: {names}")


def _state_filter(text: str) -> int:
    """The one ListQueues filter the service documents: `state: PAUSED` (or RUNNING)."""
    if not text.strip():
        return 0
    key, _, value = text.partition(":")
    states = {"RUNNING": QUEUE_RUNNING, "PAUSED": QUEUE_PAUSED}
    if key.strip() != "state" or value.strip() not in states:
        raise InvalidArgument(f"Unsupported filter {text!r}; only 'state: PAUSED|RUNNING' works")
    return states[value.strip()]


def _new_task(pb: Proto, *, queue_name: str, name: str, now_us: int) -> Task:
    """A validated task record from a CreateTask request's task."""
    if not pb.HasField("http_request"):
        raise InvalidArgument("Task.http_request is required (App Engine tasks are not emulated)")
    http = pb.http_request
    v.check_http_request(http)
    schedule_us = int(pb.schedule_time.ToMicroseconds()) if pb.HasField("schedule_time") else 0
    v.check_schedule_time(schedule_us, now_us)
    task = Task(
        name=name,
        queue_name=queue_name,
        url=http.url,
        http_method=http.http_method or HTTP_POST,
        headers=tuple(http.headers.items()),
        body=bytes(http.body),
        schedule_time_us=max(schedule_us, now_us),
        create_time_us=now_us,
        dispatch_deadline_us=v.dispatch_deadline_us(pb),
    )
    if http.HasField("oidc_token"):
        task.oidc = (http.oidc_token.service_account_email, http.oidc_token.audience)
    elif http.HasField("oauth_token"):
        task.oauth = (http.oauth_token.service_account_email, http.oauth_token.scope)
    v.check_task_size(task.size_bytes)
    return task
