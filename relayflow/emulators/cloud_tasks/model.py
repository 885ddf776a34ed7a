"""The emulator's in-memory records: compact, so 100,000 scheduled tasks stay small."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Attempt:
    """One dispatch of a task, as Task.first_attempt / last_attempt report it."""

    schedule_time_us: int
    dispatch_time_us: int
    response_time_us: int = 0
    status_code: int = 0  # google.rpc.Code of the outcome
    status_message: str = ""


@dataclass(slots=True, eq=False)
class Task:
    """A live task. Times are microseconds since the epoch."""

    name: str
    queue_name: str
    url: str
    http_method: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    schedule_time_us: int
    create_time_us: int
    dispatch_deadline_us: int
    oidc: tuple[str, str] | None = None  # (service_account_email, audience)
    oauth: tuple[str, str] | None = None  # (service_account_email, scope)
    dispatch_count: int = 0
    response_count: int = 0
    # Responses that were not 5xx: the X-CloudTasks-TaskExecutionCount header.
    execution_count: int = 0
    first_dispatch_us: int = 0
    last_attempt: Attempt | None = None
    previous_response: int = 0  # HTTP status of the previous attempt, 0 if none
    retry_reason: str = ""
    # Bumped whenever the task is (re)scheduled; heap entries with an older seq are stale.
    seq: int = 0
    running: bool = False
    live: bool = True
    # False for names the emulator generated: nobody can reuse those, so no tombstone.
    named: bool = True

    @property
    def task_id(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def queue_id(self) -> str:
        return self.queue_name.rsplit("/", 1)[-1]

    @property
    def size_bytes(self) -> int:
        header_bytes = sum(len(k) + len(v) for k, v in self.headers)
        return len(self.name) + len(self.url) + len(self.body) + header_bytes
