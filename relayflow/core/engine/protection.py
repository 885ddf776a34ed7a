"""Protection: dependencies' breakers and retry budgets around the steps that call them.

Before a step that names a dependency runs, its breaker is asked; if it says not now, the step's
task is put off (a new task later, no try spent) and remembered, and when the breaker closes
again what this process put off is brought forward (Cloud Tasks RunTask) instead of waiting out
its put-off time. After the call, its outcome feeds the breaker (a middleware of the handler
chain, see ``execution``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from relayflow.core import planner
from relayflow.core.breakers import Verdict
from relayflow.core.engine.execution import Call, Next
from relayflow.core.engine.focus import focused_at, marked
from relayflow.core.engine.kernel import Kernel, Then
from relayflow.core.engine.outcomes import Ran
from relayflow.core.flows import Flow
from relayflow.core.kinds import step_at
from relayflow.core.planner import Outcome, Retry
from relayflow.core.ports import Queue, Snapshot
from relayflow.core.putoffs import PutOffs
from relayflow.core.records import FlowRecord, NextTask

log = logging.getLogger("relayflow.core.engine")


class Protection:
    """Asks breakers, puts steps off, records outcomes, brings put-off steps forward."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel
        # What this process put off for each dependency: brought forward when its breaker closes.
        self._put_offs = PutOffs()

    def ask(self, record: FlowRecord, flow: Flow) -> Verdict | None:
        """The breaker's verdict for the step at ``record``'s position, if it names a
        dependency and breakers are on (None: nothing to ask)."""
        breakers = self._k.breakers
        if breakers is None:
            return None
        pos = record.position
        step = step_at(flow, pos, self._k.kinds)
        kind = self._k.kinds.of(step)
        dependency = kind.dependency(step)
        if dependency is None:
            return None
        key = f"{record.key}:{pos.label()}"
        # Only a step's second and later tries spend the retry budget, and only of a kind
        # whose later try is a retry (an action's, an undo's; not a poll's next check).
        retry = pos.attempt > 0 and kind.retries(pos.kind)
        verdict = breakers.check(
            dependency,
            retry=retry,
            deferrals=pos.deferral,
            key=key,
            natural_s=kind.next_try_s(step, pos, key),
        )
        self._bring_forward_closed_elsewhere()
        return verdict

    def ready(self, dependencies: Iterable[str]) -> Verdict | None:
        """The first of ``dependencies`` whose breaker says not now (open, half-open, or its
        retry budget spent), asking only; None if each is ready (or breakers are off)."""
        breakers = self._k.breakers
        if breakers is None:
            return None
        for dependency in sorted(set(dependencies)):
            verdict = breakers.ready(dependency)
            if not verdict.run:
                return verdict
        return None

    def outcome(self, call: Call, then: Next) -> Outcome:
        """Middleware: the call's outcome to its breaker (a retryable error is the dependency
        failing; anything else is an answer), and a breaker that closed brings forward."""
        called_at = self._k.clock.now()  # the breaker's latency: on the injectable clock
        outcome = then(call)
        verdict, breakers = call.verdict, self._k.breakers
        if verdict is not None and breakers is not None:
            latency_s = (self._k.clock.now() - called_at).total_seconds()
            ok = not isinstance(outcome, Retry)
            if breakers.record(verdict, ok=ok, latency_s=latency_s):
                self._bring_forward(verdict.dependency)
            self._bring_forward_closed_elsewhere()
        return outcome

    def put_off(
        self,
        found: Snapshot,
        why: str,
        until: datetime,
        *,
        then: Then | None = None,
        hand_over: bool = False,
        dependency: str | None = None,
    ) -> Ran:
        """Put the focused task off until ``until`` (a new task then, no attempt spent).
        ``then``: what runs once that is committed, before it is settled; ``hand_over`` and
        ``dependency``: see ``planner.defer``."""
        position = found.record.position
        plan = self._k.plan_for(found.record)

        def deferred(latest: FlowRecord) -> FlowRecord | None:
            current = focused_at(latest, position, found.carried)
            if current is None:
                return None
            planned = planner.defer(
                plan, current, until=until, why=why, hand_over=hand_over, dependency=dependency
            )
            ended = marked(planned)  # a hand-over ends the flow: its result is published
            marks[:] = [ended is not planned]
            return ended

        marks: list[bool] = []
        return self._k.write(found, deferred, then=then, marks=marks)

    def put_off_by(self, found: Snapshot, verdict: Verdict) -> Ran:
        """Put the focused step off as its breaker's ``verdict`` says, remembering it to bring
        forward. An undo put off because its dependency is down does not hold the flow's end:
        it goes on as the flow's clean-up."""
        assert verdict.until is not None
        remember = functools.partial(self.remember, verdict.dependency)
        return self.put_off(
            found,
            verdict.detail,
            verdict.until,
            then=remember,
            hand_over=True,
            dependency=verdict.dependency,
        )

    def remember(self, dependency: str, committed: Snapshot) -> None:
        """Remember the task of a step just put off for ``dependency``'s breaker, to bring it
        forward when the breaker closes (returns None: the commit is settled as usual)."""
        nxt = committed.record.next
        if nxt is not None and nxt.position.deferral > 0:
            self._put_offs.add(dependency, nxt, self._k.clock.now())

    def views(self) -> list[dict[str, Any]]:
        """Every dependency's breaker: state, window counts, budget, p95, transitions."""
        if self._k.breakers is None:
            return []
        return self._k.breakers.views(named=self._k.kinds.dependencies(self._k.registry))

    def _bring_forward_closed_elsewhere(self) -> None:
        """Another instance closed a breaker since we last looked: what we put off for it
        comes forward too (each instance remembers only its own)."""
        assert self._k.breakers is not None
        for closed in self._k.breakers.closed_elsewhere():
            self._bring_forward(closed)

    def _bring_forward(self, dependency: str) -> int:
        """The breaker of ``dependency`` closed: run now (Cloud Tasks RunTask) the tasks this
        process put off for it that would otherwise come back later than they need to (see
        ``PutOffs.take``: those put off since the breaker last opened, and those due more
        than ten seconds from now). How many ran. Side by side: one after another, a few
        hundred would hold this request for seconds. Best effort: each comes back on its
        own anyway."""
        began = time.perf_counter()
        assert self._k.breakers is not None
        since = self._k.breakers.last_opened(dependency)
        tasks = self._put_offs.take(dependency, since=since, now=self._k.clock.now())
        brought = run_now(self._k.queue, tasks)
        extra = {
            "dependency": dependency,
            "brought_forward": brought,
            "took_s": round(time.perf_counter() - began, 3),
        }
        log.info("breaker closed", extra=extra)
        return brought


# Tasks brought forward side by side: one after another, a few hundred would hold the request
# that brings them for seconds.
AT_ONCE = 16


def run_now(queue: Queue, tasks: list[NextTask]) -> int:
    """Dispatch ``tasks`` now (Cloud Tasks RunTask), side by side; how many ran. Best effort:
    each comes back on its own at its time anyway, so the first failure of the queue stops
    the rest (each call to a queue that is down would hold the caller for its timeout)."""
    if not tasks:
        return 0
    failed = threading.Event()

    def one(task: NextTask) -> bool:
        if failed.is_set():
            return False
        try:
            return queue.run_now(task)
        except Exception:
            failed.set()
            log.warning("could not bring a put-off task forward", exc_info=True)
            return False

    with ThreadPoolExecutor(max_workers=min(AT_ONCE, len(tasks))) as pool:
        return sum(pool.map(one, tasks))
