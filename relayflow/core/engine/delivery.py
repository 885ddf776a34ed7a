"""Delivery: claim a step, run its handler, commit what follows, and continue inline.

A step with a side effect is claimed for this delivery before its handler runs and committed
only if the claim is still this delivery's (DESIGN invariant 4); a read-only one (a poll, a
choice, a callback's wait) is committed if its position is still current — or, a poll plainly
not ready between a chain's checkpoints, not committed at all: its next poll's task carries
what it saw (``core.planner.chain``). The plan is made after the handler ran, so the history
and the next deadline count from when it finished.
"""

from __future__ import annotations

import functools
import logging
import uuid

from relayflow.core import planner, tracing
from relayflow.core.breakers import Verdict
from relayflow.core.engine.execution import Execution
from relayflow.core.engine.focus import fitting, focused_at, marked, track_of
from relayflow.core.engine.inline import (
    CONTINUE_WITHIN,
    REQUEST,
    Onward,
    first_dispatch,
    retries_an_ended_dispatch,
    runs_now,
)
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.outcomes import Ran
from relayflow.core.engine.protection import Protection
from relayflow.core.flows import Flow
from relayflow.core.planner import Outcome, Plan, chain
from relayflow.core.ports import Snapshot
from relayflow.core.position import Position
from relayflow.core.records import Effect, FlowRecord

log = logging.getLogger("relayflow.core.engine")


class Delivery:
    """Runs the step at a flow's focused position, claimed or read-only, and commits it."""

    def __init__(self, kernel: Kernel, execution: Execution, protection: Protection) -> None:
        self._k = kernel
        self._execution = execution
        self._protection = protection

    def run_step(self, found: Snapshot, flow: Flow) -> Ran:
        """Run a step's handler: first asking its dependency's breaker and budget, which may
        put it off; then read-only, or under a claim."""
        verdict = self._protection.ask(found.record, flow)
        if verdict is not None and not verdict.run:
            return self._protection.put_off_by(found, verdict)
        position = found.record.position
        if not self._k.kinds.at(flow, position).claims(position.kind):  # read only
            outcome = self._execution.execute(flow, found.record, verdict)
            if self._chained(found, flow, outcome):
                return Ran.ADVANCED
            return self.commit(found, position, flow, outcome)
        return self._run_claimed(found, flow, verdict)

    def _chained(self, found: Snapshot, flow: Flow, outcome: Outcome) -> bool:
        """Whether ``outcome`` of a poll needs no write (``planner.chain.carries``): then its
        next poll's task is made, carrying the chain's polls so far. Nothing is written, so a
        duplicate delivery makes the same task (the name dedups) and the position stays
        current for the next poll of the chain (``focus.track_of``)."""
        plan = self._k.plan(flow)
        planned = planner.after(plan, found.record, outcome)
        carried = len(found.carried)
        if not chain.carries(
            found.record, planned, outcome, carried=carried, chain=plan.poll_chain
        ):
            return False
        assert planned.next is not None  # carries() says so
        notes = chain.next_notes(planned, len(found.carried))
        with tracing.joined(found.record.trace):
            self._k.queue.ensure(found.record.key, planned.next, notes)
        return True

    def commit(
        self,
        found: Snapshot,
        position: Position,
        flow: Flow,
        outcome: Outcome,
        *,
        holder: str | None = None,
        adopt: list[Effect] | None = None,
    ) -> Ran:
        """Commit what follows ``outcome`` if ``position`` is still current (and, for a claimed
        step, the claim is still ``holder``'s); then settle. ``adopt``: a ForEach's join takes
        over the undos its lanes left to the flow."""
        plan = self._k.plan(flow)
        onward = self._onward(found.record, flow, plan, outcome)
        lease_s = self._k.limits.claim_lease_s

        def next_record(latest: FlowRecord) -> FlowRecord | None:
            current = focused_at(latest, position, found.carried)
            if current is None:
                return None
            if holder is not None and not planner.holds(current, holder):
                return None  # our lease ran out and another delivery took the step over
            if adopt:
                current = planner.adopted(current, adopt)
            planned = fitting(plan, current, planner.after(plan, current, outcome))
            if onward is not None:
                planned = onward.apply(plan, planned, lease_s=lease_s)
            ended = marked(planned)
            marks[:] = [ended is not planned]
            return ended

        marks: list[bool] = []
        then = None if onward is None else functools.partial(self._go_on, flow, onward)
        return self._k.write(found, next_record, marks=marks, then=then)

    def _run_claimed(self, found: Snapshot, flow: Flow, verdict: Verdict | None) -> Ran:
        """An action or compensation: claim the position for this delivery, run the handler,
        commit only if the claim is still ours (invariant 4).

        The first dispatch of a task that the flow's create claimed for it runs under that
        claim, with no write of its own; its commit lands only if the claim is still that
        one (a retry that took the step over claimed anew). A duplicate of that dispatch
        delivered at the same time runs too (its call carries the same idempotency key);
        only one of their commits lands, since the first moves the position on.
        """
        lease_s = self._k.limits.claim_lease_s
        record = found.record
        if first_dispatch() and planner.first_dispatch(self._k.plan(flow), record, lease_s=lease_s):
            assert record.claim is not None
            outcome = self._execution.execute(flow, record, verdict)
            return self._commit_claimed(found, record.position, flow, outcome, record.claim.holder)
        holder = uuid.uuid4().hex
        claimed = self._claim(found, flow, holder)
        if not isinstance(claimed, Snapshot):
            return claimed
        if not planner.holds(claimed.record, holder):  # out of tries: the claim ended the step
            self._k.settle(claimed.record, version=claimed)
            return Ran.ADVANCED
        outcome = self._execution.execute(flow, claimed.record, verdict)
        return self._commit_claimed(claimed, found.record.position, flow, outcome, holder)

    def _commit_claimed(
        self, claimed: Snapshot, position: Position, flow: Flow, outcome: Outcome, holder: str
    ) -> Ran:
        try:
            return self.commit(claimed, position, flow, outcome, holder=holder)
        except Exception:
            self._release(claimed.record.key, holder)
            raise

    def _claim(self, found: Snapshot, flow: Flow, holder: str) -> Snapshot | Ran:
        """Lease the current position to ``holder`` before a side effect (invariant 4); a step
        that has been delivered as often as its retries allow is ended instead."""
        position = found.record.position
        plan = self._k.plan(flow)
        lease_s = self._k.limits.claim_lease_s
        first = first_dispatch()  # a late one: it takes its task's first claim over
        again = not first  # a first claim left here was run under by a failed dispatch
        # ... as does a retry of a dispatch that was answered (a 5xx, Cloud Run's 429): no
        # one runs under that claim any more, so waiting out its lease would only add latency
        take_over = first or retries_an_ended_dispatch()

        def take(latest: FlowRecord) -> FlowRecord | None:
            current = focused_at(latest, position)
            if current is None:
                return None
            if planner.is_claimed(plan, current) and not (
                take_over and planner.first_claimed(current)
            ):
                return None
            claimed = planner.claim(plan, current, lease_s=lease_s, holder=holder, redelivery=again)
            if planner.exhausted(plan, claimed):
                return planner.crashed(plan, claimed)
            return claimed

        store = self._k.store
        taken = store.change_versioned(found.record.key, take, start=found)
        if taken is not None:
            return taken
        latest = store.read(found.record.key)
        if latest is None:
            return Ran.NO_FLOW
        if track_of(latest.record, position) is not None:
            log.info("position busy", extra={"flow_id": found.record.flow_id})
            self._k.metrics.claim_conflict(found.record.flow, position.step)
            return Ran.BUSY  # another delivery is running it: come back later
        self._k.settle(latest.record)
        return Ran.STALE

    def _release(self, flow_id: str, holder: str) -> None:
        """Give up a claim whose commit failed, so the retry need not wait out the lease.
        Best effort: if the store is down, the lease runs out instead."""
        try:
            self._k.store.change(flow_id, lambda current: planner.release(current, holder))
        except Exception:
            log.warning("could not release a claim", extra={"flow_id": flow_id}, exc_info=True)

    def _onward(
        self, record: FlowRecord, flow: Flow, plan: Plan, outcome: Outcome
    ) -> Onward | None:
        """Whether the claimed step that ``outcome`` leads to, if it is due at once, runs in
        this request (its claim taken in this commit) rather than as a task of its own.

        Only in a task's request that has used under a quarter of its budget, for a flow of
        one track (not a lane), admitted, its tenant not paused; the step's breaker is asked
        first, and if it says not now, the step is put off in this same commit. Invariant 4
        holds: the claim is taken by a conditional write, as a delivery's claim is. Invariant
        5: if this request dies, the task it came from is delivered again and finds the
        flow moved on, and settling it makes the step's task (the sweeper would too); that
        task waits out the claim's lease, as it would for a dead delivery of its own.
        """
        request = REQUEST.get()
        if not self._k.limits.continue_inline or request is None:
            return None
        left_s = request.budget_s - (self._k.clock.now() - request.began).total_seconds()
        if left_s < request.budget_s * (1 - CONTINUE_WITHIN):
            return None
        if record.is_lane or len(record.tracks) != 1 or self._k.admission.paused(record.tenant):
            return None
        preview = planner.after(plan, record, outcome)
        if not runs_now(plan, preview):
            return None
        verdict = self._protection.ask(preview, flow)
        if verdict is not None and not verdict.run:
            return Onward(holder=None, verdict=verdict, budget_s=0.0)
        budget_s = min(self._k.budget_s(preview.position.kind), left_s)
        return Onward(holder=uuid.uuid4().hex, verdict=verdict, budget_s=budget_s)

    def _go_on(self, flow: Flow, onward: Onward, committed: Snapshot) -> Ran | None:
        """Run the step this commit claimed for ``onward`` (None: it claimed none). Its task
        is not made: this request is its delivery."""
        holder = onward.holder
        if holder is None:
            if onward.verdict is not None and not onward.verdict.run:
                self._protection.remember(onward.verdict.dependency, committed)
            return None
        if not planner.holds(committed.record, holder):
            return None
        record = committed.record
        if not planner.is_claimed(self._k.plan(flow), record):
            return None
        outcome = self._execution.execute(flow, record, onward.verdict, budget_s=onward.budget_s)
        return self._commit_claimed(committed, record.position, flow, outcome, holder)
