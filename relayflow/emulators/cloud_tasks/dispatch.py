"""Sending one attempt of a task to its HTTP target, with the headers Cloud Tasks adds."""

from __future__ import annotations

import asyncio
import email.utils
import functools
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from relayflow.emulators.cloud_tasks.clock import US_PER_S, Clock
from relayflow.emulators.cloud_tasks.model import Task
from relayflow.emulators.cloud_tasks.oidc import TokenIssuer
from relayflow.emulators.cloud_tasks.protos import HTTP_METHOD_NAMES

USER_AGENT = "Google-Cloud-Tasks"
# Headers Cloud Tasks computes or replaces whatever the task says.
_REPLACED = frozenset({"host", "content-length", "user-agent"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt came to."""

    http_status: int  # 0 when no response arrived
    retry_after_us: int = 0
    error: str = ""  # why no response arrived

    @property
    def succeeded(self) -> bool:
        return 200 <= self.http_status < 300


def dispatch_headers(task: Task, *, execution_count: int) -> dict[str, str]:
    """The request headers of the task's next attempt: the task's own plus Cloud Tasks'."""
    headers = {k: v for k, v in task.headers if not _replaced(k)}
    if task.body and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/octet-stream"
    headers["User-Agent"] = USER_AGENT
    headers["X-CloudTasks-QueueName"] = task.queue_id
    headers["X-CloudTasks-TaskName"] = task.task_id
    headers["X-CloudTasks-TaskRetryCount"] = str(task.dispatch_count)
    headers["X-CloudTasks-TaskExecutionCount"] = str(execution_count)
    headers["X-CloudTasks-TaskETA"] = f"{task.schedule_time_us / US_PER_S:.6f}"
    if task.dispatch_count > 0:
        if task.previous_response:
            headers["X-CloudTasks-TaskPreviousResponse"] = str(task.previous_response)
        headers["X-CloudTasks-TaskRetryReason"] = task.retry_reason
    return headers


def _replaced(name: str) -> bool:
    lowered = name.lower()
    return (
        lowered in _REPLACED
        or lowered.startswith("x-cloudtasks-")
        or lowered.startswith("x-google-")
        or lowered.startswith("x-appengine-")
    )


@functools.lru_cache(maxsize=64)
def _timeout(deadline_us: int) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=deadline_us / US_PER_S)


def retry_after_us(value: str | None, now_us: int) -> int:
    """Parse a Retry-After header (seconds or an HTTP date) into a delay."""
    if not value:
        return 0
    value = value.strip()
    try:
        return max(0, round(float(value) * US_PER_S))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0
    return max(0, round(when.timestamp() * US_PER_S) - now_us)


class Sender(Protocol):
    """What the engine needs to deliver an attempt (Dispatcher, or a test's fake)."""

    def authorize(self, task: Task, headers: dict[str, str]) -> None:
        """Add the task's Authorization header, if it has one."""
        ...

    async def send(self, task: Task, headers: dict[str, str]) -> Outcome:
        """Deliver one request and report what came of it."""
        ...


class Dispatcher:
    """Performs attempts over one shared aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, issuer: TokenIssuer, clock: Clock) -> None:
        self._session = session
        self._issuer = issuer
        self._clock = clock

    def authorize(self, task: Task, headers: dict[str, str]) -> None:
        if task.oidc is not None:
            email, audience = task.oidc
            token = self._issuer.token(
                email=email,
                audience=audience or task.url,
                now_s=self._clock.now_us() // US_PER_S,
            )
            for name in [k for k in headers if k.lower() == "authorization"]:
                del headers[name]
            headers["Authorization"] = f"Bearer {token}"

    async def send(self, task: Task, headers: dict[str, str]) -> Outcome:
        """One HTTP request; a response slower than the dispatch deadline is a failure."""
        timeout = _timeout(task.dispatch_deadline_us)
        method = HTTP_METHOD_NAMES.get(task.http_method, "POST")
        try:
            async with self._session.request(
                method,
                task.url,
                headers=headers,
                data=task.body or None,
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                await response.read()
                return self._outcome(response)
        except TimeoutError:
            return Outcome(http_status=0, error="deadline exceeded")
        except aiohttp.ClientError as exc:
            return Outcome(http_status=0, error=f"connection failed: {exc.__class__.__name__}")

    def _outcome(self, response: aiohttp.ClientResponse) -> Outcome:
        delay_us = 0
        if response.status in (429, 503):
            delay_us = retry_after_us(response.headers.get("Retry-After"), self._clock.now_us())
        return Outcome(http_status=response.status, retry_after_us=delay_us)


async def drain(tasks: set[asyncio.Task[Any]], timeout_s: float) -> set[asyncio.Task[Any]]:
    """Wait up to `timeout_s` for in-flight attempts; return those still running."""
    if not tasks:
        return set()
    _, pending = await asyncio.wait(set(tasks), timeout=timeout_s)
    return pending
