"""A flow's bounded history, and the error and timeout details its results carry."""

from __future__ import annotations

from typing import Any

from relayflow.core.errors import PermanentError, RetryableError
from relayflow.core.planner.plan import Failed, Outcome, Plan, Retry, Waiting
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord, HistoryEntry


def log(plan: Plan, record: FlowRecord, entry: HistoryEntry, *, a_try: bool = True) -> FlowRecord:
    """Append ``entry`` to the bounded history; ``a_try`` counts it as a poll or an attempt."""
    history = [*record.history, entry]
    dropped = over_limit(plan, history)
    is_poll = entry.kind is TaskKind.POLL
    counts = {
        "polls": record.polls + (1 if a_try and is_poll else 0),
        "attempts": record.attempts + (1 if a_try and not is_poll else 0),
    }
    return record.model_copy(
        update={
            "history": history[dropped:],
            "history_dropped": record.history_dropped + dropped,
            "updated_at": plan.now,
            **counts,
        }
    )


def over_limit(plan: Plan, history: list[HistoryEntry]) -> int:
    """How many of the oldest entries of ``history`` to drop to keep it bounded. Past the
    limit the oldest quarter goes at once, not one entry per write: between trims a write
    appends to the stored list (a transform of a few hundred bytes) instead of rewriting all
    of it (``relayflow.gcp.documents``)."""
    if len(history) <= plan.history_limit:
        return 0
    return len(history) - (plan.history_limit - plan.history_limit // 4)


def new_entry(
    plan: Plan, record: FlowRecord, outcome: str, *, detail: str = "", delay_s: float | None = None
) -> HistoryEntry:
    pos = record.position
    return HistoryEntry(
        at=plan.now,
        generation=pos.generation,
        step=pos.step,
        kind=pos.kind,
        attempt=pos.attempt,
        poll=pos.poll,
        outcome=outcome,
        detail=detail[:500],
        delay_s=None if delay_s is None else round(delay_s, 3),
    )


def error_of(
    record: FlowRecord, error: RetryableError | PermanentError, *, code: str | None = None
) -> dict[str, Any]:
    pos = record.position
    # Codes and messages can come from a remote response body: bounded, so a verbose API
    # cannot push the flow document past Firestore's 1 MiB.
    return {
        "code": (code or error.code)[:100],
        "message": error.message[:2000],
        "step": pos.step,
        "attempt": pos.attempt,
    }


def timeout_of(record: FlowRecord, code: str, message: str) -> dict[str, Any]:
    pos = record.position
    return {"code": code, "message": message, "step": pos.step, "polls": pos.poll + 1}


def describe(outcome: Outcome) -> str:
    if isinstance(outcome, Retry | Failed):
        return outcome.error.message
    if isinstance(outcome, Waiting):
        return outcome.signal.detail
    return ""


def seen_in(outcome: Outcome) -> tuple[str, float | None]:
    if isinstance(outcome, Waiting):
        return f"not ready: {outcome.signal.detail}", outcome.signal.delay_s
    if isinstance(outcome, Retry):
        return f"retryable error: {outcome.error.message}", outcome.error.retry_after_s
    raise TypeError(f"not a poll-again outcome: {outcome!r}")
