"""Bulk actions run server-side: the dry run, then batches of flows as Cloud Tasks.

``create`` is the dry run: it reads once every flow the filter matches (whole documents,
``Listing.matching``; refused past ``MAX_FLOWS``), asks the engine what the action would
do to each (``Engine.preview``: the planner functions the operation itself runs), and stores
the bulk action (``bulk_actions/{id}``) with one row per flow. ``run`` acts on exactly that
set: a flow whose status or generation changed since is skipped with the reason, never acted
on as something the operator did not see.

Running, each batch is one Cloud Task (``BulkTask``, named by bulk id, round, batch and
put-off: DESIGN invariant 3) that the worker hands to ``run_batch``. A batch reads the bulk
document and acts only if the task is its next one (a duplicate or a stale task re-ensures the
next batch's task and stops); asks the breakers of what its flows' steps call and puts itself
off while one refuses (``Engine.ready``); acts on its flows one by one through the engine's
own operation (``Engine.retry``, ``Engine.cancel``, ``Engine.reset``) marked with the bulk
action, so each flow's history gets one entry naming it, who ran it and why (a retried flow's
first steps are due one by one at the bulk action's rate over the batch's time, so its flows
start at that rate, not all at once); writes its rows' outcomes, then its counts and the
cursor by compare-and-set; and only then enqueues the next batch, due one pacing period after
this one began.

Resumable after any crash: a batch delivered again (its worker was killed, its answer lost)
acts on no flow twice. Each flow's operation checks, in the compare-and-set that changes the
flow, whether its history already holds this bulk action's entry (AlreadyActed: counted done,
not done again) and whether the flow is still at the generation and status the dry run saw;
two deliveries at once are serialised by the flow document's own compare-and-set. Counts
move only with the cursor, in one compare-and-set per batch, so a batch is counted once
however often it runs. A batch task that is lost is made again by ``sweep``.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from relayflow.core.bulk import (
    CHUNK_ROWS,
    DEFAULT_RATE_PER_S,
    LOST_AFTER_S,
    MAX_FLOWS,
    MAX_PUT_OFF_S,
    MIN_RATE_PER_S,
    BulkKind,
    BulkTask,
    batch_size,
    checked_rate,
    chunk_of,
    filter_doc,
    period_s,
)
from relayflow.core.bulk_state import (
    MAX_ERRORS,
    BulkAction,
    BulkQueue,
    BulkRow,
    BulkState,
    BulkStore,
    Outcome,
    counted,
)
from relayflow.core.clock import Clock
from relayflow.core.engine import Engine
from relayflow.core.errors import (
    AlreadyActed,
    BulkNotFound,
    BulkRefused,
    FlowNotFound,
    InvalidTransition,
    RelayflowError,
)
from relayflow.core.listing import FlowFilter
from relayflow.core.planner import BulkMark
from relayflow.core.ports import Listing
from relayflow.core.records import FlowRecord

log = logging.getLogger("relayflow.core.bulk")
# Compare-and-set attempts on a bulk document or a chunk before giving up (the task is
# delivered again, and finds what landed).
WRITE_ATTEMPTS = 8
# How long a bulk action is kept after it ended (Firestore's TTL deletes it then), as flows are
# by default (RELAYFLOW_RETENTION_DAYS).
RETENTION_S = 30 * 24 * 3600.0
_LONGEST_RUN = timedelta(seconds=MAX_FLOWS / MIN_RATE_PER_S)


@dataclass(frozen=True)
class BatchReport:
    """What one delivery of a batch task did: ``outcome`` is acted, put_off, stale (not the
    bulk action's next batch: its next is made sure of), idle (the bulk action is not
    running) or gone (no such bulk action)."""

    outcome: str
    bulk_id: str
    batch: int
    done: int = 0
    skipped: int = 0
    failed: int = 0
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


class BulkRunner:
    """Bulk actions over ``engine``'s flows, kept in ``store``, batches run through ``queue``."""

    def __init__(
        self,
        engine: Engine,
        store: BulkStore,
        listing: Listing,
        queue: BulkQueue,
        clock: Clock,
        *,
        max_flows: int = MAX_FLOWS,
        lost_after_s: float = LOST_AFTER_S,
        retention_s: float = RETENTION_S,
    ) -> None:
        self._engine = engine
        self._store = store
        self._listing = listing
        self._queue = queue
        self._clock = clock
        self._max_flows = max_flows
        self._lost_after_s = lost_after_s
        self._retention = timedelta(seconds=retention_s)

    # -- what operators do ---------------------------------------------------------------

    def create(
        self,
        action: BulkKind | str,
        wanted: FlowFilter,
        *,
        reason: str,
        by: str,
        rate_per_s: float = DEFAULT_RATE_PER_S,
        step: str | None = None,
        undo: bool = True,
    ) -> BulkAction:
        """The dry run: resolve the flows ``wanted`` matches once, preview ``action`` on each
        (a reset: to ``step``, undoing what ran from it unless not ``undo``), and store the
        bulk action (previewed). BulkRefused if more than ``max_flows`` match, or the action
        (a reset without its step) or the rate is not one there is."""
        kind = _kind(action)
        if (kind is BulkKind.RESET) != (step is not None):
            raise BulkRefused("a reset, and only a reset, names the step to reset to")
        try:
            rate = checked_rate(float(rate_per_s))
        except ValueError as exc:
            raise BulkRefused(str(exc)) from None
        found = self._matching(wanted)
        preview = functools.partial(self._engine.preview, step=step, undo=undo)
        rows = [BulkRow.of(r, preview(r, kind.value)) for r in found]
        now = self._clock.now()
        refused: dict[str, int] = {}
        for row in rows:
            if not row.allowed:
                refused = counted(refused, row.reason)
        chunks = [rows[i : i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS)]
        made = BulkAction(
            id=f"bulk-{secrets.token_hex(6)}",
            action=kind,
            step=step,
            undo=undo,
            filter=filter_doc(wanted),
            tenant=wanted.tenant,
            reason=reason,
            by=by,
            rate_per_s=rate,
            batch_size=batch_size(rate),
            created_at=now,
            updated_at=now,
            matched=len(rows),
            allowed=sum(1 for row in rows if row.allowed),
            chunks=len(chunks),
            refused=refused,
            expire_at=now + self._retention,
        ).logged(now, "previewed", by=by, reason=reason)
        # The rows outlive their bulk document however long it runs (at most MAX_FLOWS flows
        # at MIN_RATE_PER_S: 12 days) and however long it is kept after.
        self._store.create(made, chunks, rows_expire_at=now + 2 * self._retention + _LONGEST_RUN)
        log.info("bulk action previewed", extra={"bulk": made.id, "matched": made.matched})
        return self.get(made.id)

    def get(self, bulk_id: str) -> BulkAction:
        """The bulk action, or BulkNotFound."""
        found = self._store.read(bulk_id)
        if found is None:
            raise BulkNotFound(f"no bulk action {bulk_id!r}")
        return found

    def recent(self, *, limit: int = 50) -> list[BulkAction]:
        """Bulk actions, the newest made first."""
        return self._store.recent(limit=limit)

    def rows(self, bulk_id: str, page: int) -> list[BulkRow]:
        """Page ``page`` (0, 1, …) of the bulk action's rows: one chunk of CHUNK_ROWS."""
        action = self.get(bulk_id)
        if not 0 <= page < max(1, action.chunks):
            raise BulkRefused(f"page must be 0..{max(0, action.chunks - 1)}, not {page}")
        return self._store.rows(bulk_id, page)[0]

    def run(self, bulk_id: str, *, by: str, reason: str = "") -> BulkAction:
        """Start acting on a previewed bulk action's flows; its first batch is due now."""

        def started(action: BulkAction) -> BulkAction:
            _require(action, (BulkState.PREVIEWED,), "run")
            now = self._clock.now()
            state = BulkState.RUNNING if action.matched else BulkState.DONE
            update = {"state": state, "run_by": by, "started_at": now, "next_at": now}
            if state is BulkState.DONE:
                update |= {"finished_at": now, "expire_at": now + self._retention}
            return action.model_copy(update=update).logged(now, "run", by=by, reason=reason)

        return self._ensured(self._change(bulk_id, started))

    def pause(self, bulk_id: str, *, by: str, reason: str = "") -> BulkAction:
        """Stop acting after the batch under way; ``resume`` goes on from the next one."""

        def paused(action: BulkAction) -> BulkAction:
            _require(action, (BulkState.RUNNING,), "pause")
            now = self._clock.now()
            stopped = action.model_copy(update={"state": BulkState.PAUSED, "next_at": None})
            return stopped.logged(now, "paused", by=by, reason=reason)

        return self._change(bulk_id, paused)

    def resume(self, bulk_id: str, *, by: str, reason: str = "") -> BulkAction:
        """Go on with a paused bulk action from its next batch, now (a new round of tasks)."""

        def resumed(action: BulkAction) -> BulkAction:
            _require(action, (BulkState.PAUSED,), "resume")
            now = self._clock.now()
            update = {
                "state": BulkState.RUNNING,
                "round": action.round + 1,
                "deferrals": 0,
                "next_at": now,
                "waiting": "",
            }
            return action.model_copy(update=update).logged(now, "resumed", by=by, reason=reason)

        return self._ensured(self._change(bulk_id, resumed))

    def cancel(self, bulk_id: str, *, by: str, reason: str = "") -> BulkAction:
        """Stop a bulk action for good (previewed, running or paused): what it did stays
        done; the flows it did not reach are left as they are."""

        def cancelled(action: BulkAction) -> BulkAction:
            _require(action, (BulkState.PREVIEWED, BulkState.RUNNING, BulkState.PAUSED), "cancel")
            now = self._clock.now()
            update = {"state": BulkState.CANCELLED, "finished_at": now, "next_at": None}
            update["expire_at"] = now + self._retention
            return action.model_copy(update=update).logged(now, "cancelled", by=by, reason=reason)

        return self._change(bulk_id, cancelled)

    # -- what the worker and the sweeper do ----------------------------------------------

    def run_batch(self, task: BulkTask) -> BatchReport:
        """One delivery of a batch task (see the module docstring)."""
        action = self._store.read(task.bulk_id)
        if action is None:
            return BatchReport("gone", task.bulk_id, task.batch)
        if action.state is not BulkState.RUNNING:
            return BatchReport("idle", task.bulk_id, task.batch, detail=action.state.value)
        if task.slot != action.task().slot:
            self._ensure(action)  # what a crash between cursor and enqueue left undone
            return BatchReport("stale", task.bulk_id, task.batch)
        began = self._clock.now()
        chunk, start, end = chunk_of(task.batch, action.batch_size)
        rows, version = self._store.rows(action.id, chunk)
        if not rows:
            return self._failed(action, f"its rows (chunk {chunk}) are gone")
        waiting = self._engine.ready(_calls(rows[start:end]))
        if waiting is not None:
            assert waiting.until is not None
            return self._put_off(action, waiting.detail, waiting.until)
        spacing = timedelta(seconds=1.0 / action.rate_per_s)
        acted = [
            self._act(action, row, at=began + i * spacing) for i, row in enumerate(rows[start:end])
        ]
        self._write_rows(action.id, chunk, start, acted, rows, version)
        return self._advance(action, task, acted, began)

    def sweep(self) -> int:
        """Make again, under a new name, the next batch task of every running bulk action
        that is ``lost_after_s`` late (its task lost, or dropped after its last retry): a batch
        task that was only slow acts on nothing twice. How many were made."""
        now = self._clock.now()
        late = now - timedelta(seconds=self._lost_after_s)
        made = 0
        for action in self._store.running():
            if action.next_at is None or action.next_at > late:
                continue
            try:
                self._put_off(action, "its batch task was lost: made again by the sweeper", now)
                made += 1
            except RelayflowError:
                log.warning("bulk action not rescued", extra={"bulk": action.id}, exc_info=True)
        return made

    # -- the parts -----------------------------------------------------------------------

    def _matching(self, wanted: FlowFilter) -> list[FlowRecord]:
        """Every flow ``wanted`` matches (read once, whole); BulkRefused past ``max_flows``."""
        found = [r for r in self._listing.matching(wanted, limit=self._max_flows) if not r.is_lane]
        if len(found) > self._max_flows:
            raise BulkRefused(
                f"more than {self._max_flows} flows match: a bulk action takes at most that "
                "many; narrow the filter (a time range, a status, a flow)"
            )
        return sorted(found, key=lambda r: (r.updated_at, r.key), reverse=True)

    def _act(self, action: BulkAction, row: BulkRow, *, at: datetime) -> BulkRow:
        """Act on one flow through the engine's own operation, once (see the module
        docstring); the row with what became of it. A retried flow's first steps are due
        ``at``: a batch's flows start one by one at the bulk action's rate, not all at once."""
        now = self._clock.now()
        if row.outcome is not None:
            return row  # a delivery before this one recorded it
        if not row.allowed:
            return row.ended(Outcome.SKIPPED, f"refused by the dry run: {row.reason}", now)
        mark = BulkMark(action.id, row.generation, row.status)
        why = f"bulk {action.action} {action.id}: {action.reason}"
        try:
            self._operate(action, row.key, why, mark, max(0.0, (at - now).total_seconds()))
        except AlreadyActed:
            return row.ended(Outcome.DONE, "acted on by an earlier delivery of its batch", now)
        except InvalidTransition as refused:
            return row.ended(Outcome.SKIPPED, str(refused), now)
        except FlowNotFound:
            return row.ended(Outcome.SKIPPED, "the flow is gone (expired or deleted)", now)
        except RelayflowError as failed:  # e.g. the store refused the change for good
            return row.ended(Outcome.FAILED, f"{type(failed).__name__}: {failed}", now)
        return row.ended(Outcome.DONE, "", now)

    def _operate(
        self, action: BulkAction, key: str, why: str, mark: BulkMark, start_in_s: float
    ) -> None:
        """The engine's own operation of one flow, marked with the bulk action."""
        by = action.run_by
        if action.action is BulkKind.RETRY:
            self._engine.retry(key, reason=why, by=by, bulk=mark, start_in_s=start_in_s)
        elif action.action is BulkKind.RESET:
            assert action.step is not None  # create() refuses a reset without its step
            self._engine.reset(key, action.step, undo=action.undo, reason=why, by=by, bulk=mark)
        else:
            self._engine.cancel(key, why, by=by, bulk=mark)

    def _write_rows(
        self,
        bulk_id: str,
        chunk: int,
        start: int,
        acted: Sequence[BulkRow],
        rows: list[BulkRow],
        version: Any,
    ) -> None:
        """Record the batch's outcomes in its chunk, by compare-and-set: an outcome already
        recorded (by a delivery that ran at the same time) stays."""
        for _ in range(WRITE_ATTEMPTS):
            merged = list(rows)
            for i, row in enumerate(acted, start):
                if i < len(merged) and merged[i].outcome is None:
                    merged[i] = row
            if self._store.write_rows(bulk_id, chunk, merged, version):
                return
            rows, version = self._store.rows(bulk_id, chunk)
        raise RuntimeError(f"bulk {bulk_id} chunk {chunk}: {WRITE_ATTEMPTS} writers in a row won")

    def _advance(
        self, action: BulkAction, task: BulkTask, acted: Sequence[BulkRow], began: datetime
    ) -> BatchReport:
        """Count the batch and move the cursor past it (once, whoever else ran it), then
        enqueue the next batch, due one pacing period after this one began."""
        pace = timedelta(seconds=period_s(action.rate_per_s, action.batch_size))
        now = self._clock.now()
        tally = _tally(acted)

        def advanced(current: BulkAction) -> BulkAction | None:
            if current.next_batch != task.batch or current.round != task.round:
                return None  # counted by the delivery that got there first
            last = task.batch + 1 >= current.batches
            return _counted(current, acted, now).model_copy(
                update={
                    "next_batch": task.batch + 1,
                    "deferrals": 0,
                    "waiting": "",
                    "next_at": None if last else max(now, began + pace),
                    **_finished(current, last, now, self._retention),
                }
            )

        written = self._change_if(action.id, advanced)
        if written is not None:
            self._ensure(written)
        return BatchReport(
            "acted", action.id, task.batch, tally["done"], tally["skipped"], tally["failed"]
        )

    def _put_off(self, action: BulkAction, why: str, until: datetime) -> BatchReport:
        """Put the next batch off until ``until`` (at most MAX_PUT_OFF_S: it looks again),
        under a new task name."""
        now = self._clock.now()
        until = min(max(until, now), now + timedelta(seconds=MAX_PUT_OFF_S))
        slot = action.task().slot

        def deferred(current: BulkAction) -> BulkAction | None:
            if current.state is not BulkState.RUNNING or current.task().slot != slot:
                return None
            update = {"deferrals": current.deferrals + 1, "next_at": until, "waiting": why}
            return current.model_copy(update={**update, "updated_at": now})

        written = self._change_if(action.id, deferred)
        if written is not None:
            self._ensure(written)
        return BatchReport("put_off", action.id, action.next_batch, detail=why)

    def _failed(self, action: BulkAction, why: str) -> BatchReport:
        def failed(current: BulkAction) -> BulkAction | None:
            if current.state is not BulkState.RUNNING:
                return None
            now = self._clock.now()
            update = {"state": BulkState.FAILED, "finished_at": now, "next_at": None}
            update["expire_at"] = now + self._retention
            return current.model_copy(update=update).logged(now, "failed", reason=why)

        self._change_if(action.id, failed)
        log.error("bulk action failed", extra={"bulk": action.id, "reason": why})
        return BatchReport("failed", action.id, action.next_batch, detail=why)

    def _ensured(self, action: BulkAction) -> BulkAction:
        self._ensure(action)
        return action

    def _ensure(self, action: BulkAction) -> None:
        """Make sure the running bulk action's next batch task exists (its name dedups)."""
        if action.state is BulkState.RUNNING and action.next_at is not None:
            self._queue.ensure_batch(action.task(), action.next_at)

    def _change(self, bulk_id: str, change: Any) -> BulkAction:
        """Apply an operator's ``change`` by compare-and-set; BulkNotFound, or what it raises."""
        written = self._change_if(bulk_id, change)
        assert written is not None  # an operator's change always writes, or raises
        return written

    def _change_if(self, bulk_id: str, change: Any) -> BulkAction | None:
        """Apply ``change`` (None: nothing to write) by compare-and-set, reading again after
        a rival's write; the written document."""
        for _ in range(WRITE_ATTEMPTS):
            current = self.get(bulk_id)
            new = change(current)
            if new is None:
                return None
            if self._store.write(new):
                return self._store.read(bulk_id) or new
        raise RuntimeError(f"bulk {bulk_id}: {WRITE_ATTEMPTS} writers in a row won")


def _kind(action: BulkKind | str) -> BulkKind:
    try:
        return BulkKind(action)
    except ValueError:
        kinds = ", ".join(k.value for k in BulkKind)
        raise BulkRefused(f"action must be one of {kinds}, not {str(action)[:40]!r}") from None


def _require(action: BulkAction, states: tuple[BulkState, ...], what: str) -> None:
    if action.state not in states:
        allowed = " or ".join(s.value for s in states)
        raise BulkRefused(
            f"bulk action {action.id} is {action.state.value}: only a {allowed} one can {what}"
        )


def _calls(rows: Iterable[BulkRow]) -> set[str]:
    """What the flows a batch will act on call (their rows' dependencies)."""
    return {d for row in rows if row.outcome is None and row.allowed for d in row.dependencies}


def _tally(rows: Iterable[BulkRow]) -> dict[str, int]:
    outcomes = [row.outcome for row in rows]
    return {
        "done": outcomes.count(Outcome.DONE),
        "skipped": outcomes.count(Outcome.SKIPPED),
        "failed": outcomes.count(Outcome.FAILED),
    }


def _counted(action: BulkAction, rows: Sequence[BulkRow], now: datetime) -> BulkAction:
    """``action`` with a batch's outcomes added to its counts."""
    tally = _tally(rows)
    skipped_why, errors = action.skipped_why, list(action.errors)
    for row in rows:
        if row.outcome is Outcome.SKIPPED:
            skipped_why = counted(skipped_why, row.note)
        elif row.outcome is Outcome.FAILED:
            errors = [*errors, f"{row.flow_id}: {row.note}"][-MAX_ERRORS:]
    return action.model_copy(
        update={
            "done": action.done + tally["done"],
            "skipped": action.skipped + tally["skipped"],
            "failed": action.failed + tally["failed"],
            "skipped_why": skipped_why,
            "errors": errors,
            "updated_at": now,
        }
    )


def _finished(
    action: BulkAction, last: bool, now: datetime, retention: timedelta
) -> dict[str, Any]:
    """The update that ends a bulk action whose last batch this was (one an operator
    cancelled meanwhile stays cancelled)."""
    if not last or action.state.over:
        return {}
    done = action.logged(now, "done")
    return {
        "state": BulkState.DONE,
        "finished_at": now,
        "log": done.log,
        "expire_at": now + retention,
    }
