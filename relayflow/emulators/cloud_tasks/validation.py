"""Request validation as the service does it; every refusal says what was wrong."""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from relayflow.emulators.cloud_tasks.clock import US_PER_S
from relayflow.emulators.cloud_tasks.errors import InvalidArgument
from relayflow.emulators.cloud_tasks.protos import METHODS_WITH_BODY, Proto

LOCATION_RE = re.compile(r"^projects/([A-Za-z0-9.:_-]{1,100})/locations/([A-Za-z0-9-]{1,63})$")
QUEUE_ID_RE = re.compile(r"^[A-Za-z0-9-]{1,100}$")
TASK_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,500}$")
# RFC 9110 field names are tokens; values may hold any visible character, space and HTAB but no
# other control character: a CR or LF would split the request (header injection).
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
HEADER_VALUE_BAD_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

MAX_SCHEDULE_AHEAD_US = 30 * 24 * 3600 * US_PER_S
MIN_DEADLINE_US = 15 * US_PER_S
MAX_DEADLINE_US = 30 * 60 * US_PER_S
DEFAULT_DEADLINE_US = 10 * 60 * US_PER_S
MAX_TASK_BYTES = 1024 * 1024
MAX_HEADER_BYTES = 80 * 1024
MAX_URL_CHARS = 2083
MAX_RATE_PER_S = 500.0
MAX_CONCURRENT = 5000
MAX_PAGE_SIZE_TASKS = 1000
MAX_PAGE_SIZE_QUEUES = 9800


def location_of(parent: str) -> str:
    """Check a `projects/P/locations/L` parent."""
    if not LOCATION_RE.match(parent):
        raise InvalidArgument(
            f"Invalid resource field value in the request: parent {parent!r} must have the "
            "form projects/PROJECT_ID/locations/LOCATION_ID"
        )
    return parent


def split_queue_name(name: str) -> tuple[str, str]:
    """Check a full queue name and return (parent, queue id)."""
    parent, sep, queue_id = name.rpartition("/queues/")
    if not sep or not LOCATION_RE.match(parent):
        raise InvalidArgument(
            f"Invalid queue name {name!r}: it must have the form "
            "projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID"
        )
    if not QUEUE_ID_RE.match(queue_id):
        raise InvalidArgument(
            f"Invalid queue id {queue_id!r}: it may contain only letters ([A-Za-z]), numbers "
            "([0-9]) and hyphens (-), and must be 1 to 100 characters long"
        )
    return parent, queue_id


def split_task_name(name: str) -> tuple[str, str]:
    """Check a full task name and return (queue name, task id)."""
    queue_name, sep, task_id = name.rpartition("/tasks/")
    if not sep:
        raise InvalidArgument(
            f"Invalid task name {name!r}: it must have the form "
            "projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID/tasks/TASK_ID"
        )
    split_queue_name(queue_name)
    check_task_id(task_id)
    return queue_name, task_id


def check_task_id(task_id: str) -> None:
    if not TASK_ID_RE.match(task_id):
        raise InvalidArgument(
            f"Invalid task id {task_id!r}: it may contain only letters ([A-Za-z]), numbers "
            "([0-9]), hyphens (-) and underscores (_), and must be 1 to 500 characters long"
        )


def check_queue_config(queue: Proto) -> None:
    """Check the settable RateLimits and RetryConfig fields of a queue."""
    limits = queue.rate_limits
    if limits.max_dispatches_per_second < 0 or limits.max_dispatches_per_second > MAX_RATE_PER_S:
        raise InvalidArgument(
            "rate_limits.max_dispatches_per_second must be between 0 and 500, "
            f"got {limits.max_dispatches_per_second}"
        )
    if limits.max_concurrent_dispatches < 0 or limits.max_concurrent_dispatches > MAX_CONCURRENT:
        raise InvalidArgument(
            "rate_limits.max_concurrent_dispatches must be between 0 and 5000, "
            f"got {limits.max_concurrent_dispatches}"
        )
    _check_retry_config(queue.retry_config)


def _check_retry_config(retry: Proto) -> None:
    if retry.max_attempts < -1:
        raise InvalidArgument(
            "retry_config.max_attempts must be -1 (unlimited) or positive, "
            f"got {retry.max_attempts}"
        )
    if retry.max_doublings < 0:
        raise InvalidArgument(f"retry_config.max_doublings must be >= 0, got {retry.max_doublings}")
    for field in ("min_backoff", "max_backoff", "max_retry_duration"):
        if getattr(retry, field).ToMicroseconds() < 0:
            raise InvalidArgument(f"retry_config.{field} must not be negative")
    if (
        retry.HasField("min_backoff")
        and retry.HasField("max_backoff")
        and retry.min_backoff.ToMicroseconds() > retry.max_backoff.ToMicroseconds()
    ):
        raise InvalidArgument("retry_config.min_backoff must not exceed retry_config.max_backoff")


def check_http_request(http: Proto) -> None:
    """Check the target URL, method/body pairing and header size of an HTTP task."""
    _check_url(http.url)
    if http.body and http.http_method not in METHODS_WITH_BODY and http.http_method != 0:
        raise InvalidArgument(
            "HttpRequest.body may be set only for the POST, PUT and PATCH methods"
        )
    _check_headers(http.headers)


def _check_headers(headers: Mapping[str, str]) -> None:
    """Refuse headers no HTTP request can carry, as the service does at CreateTask."""
    for name, value in headers.items():
        if not HEADER_NAME_RE.match(name):
            raise InvalidArgument(f"HttpRequest.headers: invalid header name {name!r}")
        if HEADER_VALUE_BAD_RE.search(value):
            raise InvalidArgument(
                f"HttpRequest.headers: the value of {name!r} contains a control character "
                "(CR, LF and other control characters are not allowed)"
            )
    header_bytes = sum(len(k) + len(v) for k, v in headers.items())
    if header_bytes > MAX_HEADER_BYTES:
        raise InvalidArgument(f"HttpRequest.headers are {header_bytes} bytes, the limit is 80 KB")


def _check_url(url: str) -> None:
    if not url:
        raise InvalidArgument("HttpRequest.url is required")
    if len(url) > MAX_URL_CHARS:
        raise InvalidArgument(f"HttpRequest.url is {len(url)} characters, the limit is 2083")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(
            f"HttpRequest.url {url!r} must be an absolute http:// or https:// URL"
        )


def check_schedule_time(schedule_time_us: int, now_us: int) -> None:
    if schedule_time_us - now_us > MAX_SCHEDULE_AHEAD_US:
        raise InvalidArgument(
            "Task.schedule_time must be at most 30 days in the future, "
            f"got {(schedule_time_us - now_us) / US_PER_S / 86400:.1f} days ahead"
        )


def dispatch_deadline_us(task: Proto) -> int:
    """The task's dispatch_deadline, defaulted and range-checked (15 s to 30 min)."""
    if not task.HasField("dispatch_deadline"):
        return DEFAULT_DEADLINE_US
    deadline = int(task.dispatch_deadline.ToMicroseconds())
    if not MIN_DEADLINE_US <= deadline <= MAX_DEADLINE_US:
        raise InvalidArgument(
            "Task.dispatch_deadline must be between 15 seconds and 30 minutes, "
            f"got {deadline / US_PER_S:g} s"
        )
    return deadline


def check_task_size(size_bytes: int) -> None:
    if size_bytes > MAX_TASK_BYTES:
        raise InvalidArgument(f"Task size is {size_bytes} bytes; the maximum is 1 MB (1048576)")


def page_size(requested: int, maximum: int) -> int:
    if requested < 0:
        raise InvalidArgument(f"page_size must not be negative, got {requested}")
    if requested > maximum:
        raise InvalidArgument(f"page_size must be at most {maximum}, got {requested}")
    return requested or maximum
