"""One queue at run time: its configuration, its tasks ordered by schedule time, its limits."""

from __future__ import annotations

import asyncio
import heapq

from relayflow.emulators.cloud_tasks.codec import retry_policy
from relayflow.emulators.cloud_tasks.model import Task
from relayflow.emulators.cloud_tasks.protos import QUEUE_PAUSED, Proto
from relayflow.emulators.cloud_tasks.ratelimit import TokenBucket
from relayflow.emulators.cloud_tasks.retry import RetryPolicy


class QueueRuntime:
    """A queue's state; the engine's per-queue loop asks it what to dispatch next."""

    def __init__(self, config: Proto, *, now_us: int) -> None:
        self.config = config
        self.tasks: dict[str, Task] = {}
        # (schedule_time_us, seq, task); an entry whose seq differs from task.seq is stale.
        self._heap: list[tuple[int, int, Task]] = []
        self.in_flight = 0
        self.wake = asyncio.Event()
        self.policy: RetryPolicy = retry_policy(config)
        limits = config.rate_limits
        self.bucket = TokenBucket(
            rate_per_s=limits.max_dispatches_per_second,
            burst=limits.max_burst_size,
            now_us=now_us,
        )

    @property
    def name(self) -> str:
        name: str = self.config.name
        return name

    @property
    def paused(self) -> bool:
        return bool(self.config.state == QUEUE_PAUSED)

    def reconfigure(self, config: Proto, *, now_us: int) -> None:
        self.config = config
        self.policy = retry_policy(config)
        limits = config.rate_limits
        self.bucket.reconfigure(
            rate_per_s=limits.max_dispatches_per_second,
            burst=limits.max_burst_size,
            now_us=now_us,
        )
        self.wake.set()

    def schedule(self, task: Task, seq: int) -> None:
        """(Re)queue a task at its schedule_time; wakes the loop if it is now first."""
        task.seq = seq
        entry = (task.schedule_time_us, seq, task)
        heapq.heappush(self._heap, entry)
        if self._heap[0] is entry:
            self.wake.set()

    def next_delay_us(self, now_us: int) -> int | None:
        """0 if a task can go now, a delay if one can go later, None to wait for a wake-up."""
        if self.paused or self.in_flight >= self.config.rate_limits.max_concurrent_dispatches:
            return None
        head = self._head()
        if head is None:
            return None
        return max(0, head.schedule_time_us - now_us, self.bucket.wait_us(now_us))

    def pop(self) -> Task:
        """Remove and return the first due task (call after next_delay_us returned 0)."""
        _, _, task = heapq.heappop(self._heap)
        return task

    def _head(self) -> Task | None:
        heap = self._heap
        while heap:
            _, seq, task = heap[0]
            if task.live and not task.running and task.seq == seq:
                return task
            heapq.heappop(heap)
        return None
