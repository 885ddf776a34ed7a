"""Conversions between the emulator's records and Cloud Tasks protobuf messages."""

from __future__ import annotations

from relayflow.emulators.cloud_tasks.clock import US_PER_S
from relayflow.emulators.cloud_tasks.model import Attempt, Task
from relayflow.emulators.cloud_tasks.protos import (
    HTTP_POST,
    QUEUE_RUNNING,
    VIEW_BASIC,
    VIEW_FULL,
    Proto,
    QueuePb,
    TaskPb,
)
from relayflow.emulators.cloud_tasks.ratelimit import burst_size_for
from relayflow.emulators.cloud_tasks.retry import RetryPolicy

# Defaults the service fills in for a queue created through the Cloud Tasks API.
DEFAULT_RATE_PER_S = 500.0
DEFAULT_MAX_CONCURRENT = 1000
DEFAULT_MAX_ATTEMPTS = 100
DEFAULT_MIN_BACKOFF_US = 100_000
DEFAULT_MAX_BACKOFF_US = 3600 * US_PER_S
DEFAULT_MAX_DOUBLINGS = 16


def with_queue_defaults(queue: Proto) -> Proto:
    """A copy of `queue` with every unset RateLimits/RetryConfig field at the service default."""
    out = QueuePb()
    out.CopyFrom(queue)
    limits = out.rate_limits
    if limits.max_dispatches_per_second <= 0:
        limits.max_dispatches_per_second = DEFAULT_RATE_PER_S
    if limits.max_concurrent_dispatches <= 0:
        limits.max_concurrent_dispatches = DEFAULT_MAX_CONCURRENT
    limits.max_burst_size = burst_size_for(limits.max_dispatches_per_second)
    retry = out.retry_config
    if retry.max_attempts == 0:
        retry.max_attempts = DEFAULT_MAX_ATTEMPTS
    if not retry.HasField("min_backoff"):
        retry.min_backoff.FromMicroseconds(DEFAULT_MIN_BACKOFF_US)
    if not retry.HasField("max_backoff"):
        retry.max_backoff.FromMicroseconds(DEFAULT_MAX_BACKOFF_US)
    if retry.max_doublings == 0:
        retry.max_doublings = DEFAULT_MAX_DOUBLINGS
    if out.state == 0:
        out.state = QUEUE_RUNNING
    return out


def retry_policy(queue: Proto) -> RetryPolicy:
    retry = queue.retry_config
    return RetryPolicy(
        max_attempts=retry.max_attempts,
        max_retry_duration_us=int(retry.max_retry_duration.ToMicroseconds()),
        min_backoff_us=int(retry.min_backoff.ToMicroseconds()),
        max_backoff_us=int(retry.max_backoff.ToMicroseconds()),
        max_doublings=retry.max_doublings,
    )


def task_to_pb(task: Task, *, view: int, retry_config: Proto | None = None) -> Proto:
    """The Task message a client sees; BASIC omits the body."""
    pb = TaskPb()
    pb.name = task.name
    http = pb.http_request
    http.url = task.url
    http.http_method = task.http_method
    for key, value in task.headers:
        http.headers[key] = value
    if view == VIEW_FULL:
        http.body = task.body
    _set_auth(http, task)
    pb.schedule_time.FromMicroseconds(task.schedule_time_us)
    pb.create_time.FromMicroseconds(task.create_time_us)
    pb.dispatch_deadline.FromMicroseconds(task.dispatch_deadline_us)
    pb.dispatch_count = task.dispatch_count
    pb.response_count = task.response_count
    if task.first_dispatch_us:
        pb.first_attempt.dispatch_time.FromMicroseconds(task.first_dispatch_us)
    if task.last_attempt is not None:
        _set_attempt(pb.last_attempt, task.last_attempt)
    pb.view = view or VIEW_BASIC
    if retry_config is not None:
        pb.retry_config.CopyFrom(retry_config)
    return pb


def _set_auth(http: Proto, task: Task) -> None:
    if task.oidc is not None:
        http.oidc_token.service_account_email = task.oidc[0]
        http.oidc_token.audience = task.oidc[1]
    elif task.oauth is not None:
        http.oauth_token.service_account_email = task.oauth[0]
        http.oauth_token.scope = task.oauth[1]


def _set_attempt(pb: Proto, attempt: Attempt) -> None:
    pb.schedule_time.FromMicroseconds(attempt.schedule_time_us)
    pb.dispatch_time.FromMicroseconds(attempt.dispatch_time_us)
    if attempt.response_time_us:
        pb.response_time.FromMicroseconds(attempt.response_time_us)
        pb.response_status.code = attempt.status_code
        pb.response_status.message = attempt.status_message


def task_from_pb(pb: Proto, *, queue_name: str) -> Task:
    """Rebuild a task from its FULL message (how the store keeps it)."""
    http = pb.http_request
    task = Task(
        name=pb.name,
        queue_name=queue_name,
        url=http.url,
        http_method=http.http_method or HTTP_POST,
        headers=tuple(sorted(http.headers.items())),
        body=bytes(http.body),
        schedule_time_us=int(pb.schedule_time.ToMicroseconds()),
        create_time_us=int(pb.create_time.ToMicroseconds()),
        dispatch_deadline_us=int(pb.dispatch_deadline.ToMicroseconds()),
        oidc=_oidc_of(http),
        oauth=_oauth_of(http),
        dispatch_count=pb.dispatch_count,
        response_count=pb.response_count,
    )
    if pb.HasField("first_attempt"):
        task.first_dispatch_us = int(pb.first_attempt.dispatch_time.ToMicroseconds())
    if pb.HasField("last_attempt"):
        task.last_attempt = _attempt_of(pb.last_attempt)
    return task


def _attempt_of(pb: Proto) -> Attempt:
    return Attempt(
        schedule_time_us=int(pb.schedule_time.ToMicroseconds()),
        dispatch_time_us=int(pb.dispatch_time.ToMicroseconds()),
        response_time_us=int(pb.response_time.ToMicroseconds())
        if pb.HasField("response_time")
        else 0,
        status_code=pb.response_status.code,
        status_message=pb.response_status.message,
    )


def _oidc_of(http: Proto) -> tuple[str, str] | None:
    if not http.HasField("oidc_token"):
        return None
    return (http.oidc_token.service_account_email, http.oidc_token.audience)


def _oauth_of(http: Proto) -> tuple[str, str] | None:
    if not http.HasField("oauth_token"):
        return None
    return (http.oauth_token.service_account_email, http.oauth_token.scope)
