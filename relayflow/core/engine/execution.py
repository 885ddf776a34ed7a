"""Running a step's handler: what it is told, how its ending is classified, and the policies
that wrap every call.

A handler call passes through a chain of middleware, outermost first, the way dramatiq's
middleware wraps a message: each gets the call and the rest of the chain, and may act before
and after it. The engine's chain is retry counting, the breaker's outcome (``protection``),
timing and metrics, then tracing; the innermost link runs the handler and classifies how it
ended (DESIGN invariant 7). A handler never sees any of it.

A flow's sealed values (``core.sealing``) are opened here, for the handler's context, and a
handler's output is sealed (then offloaded if large) as it is stored; what the handler's
ending says (an error's message, a not-ready detail) is scrubbed of them before it reaches
the history, the logs or a span (``core.scrubbing``).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from opentelemetry.trace import Span

from relayflow.core import scrubbing, tracing
from relayflow.core.breakers import Verdict
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.keys import idempotency_key
from relayflow.core.errors import (
    NotReady,
    PayloadUnavailable,
    PermanentError,
    RetryableError,
    StepError,
    Unreadable,
    UnreadableSealedValue,
)
from relayflow.core.flows import Flow, Handler, StepContext
from relayflow.core.kinds import step_at
from relayflow.core.payloads import INLINE
from relayflow.core.planner import Completed, Failed, Outcome, Retry, Waiting
from relayflow.core.position import Position
from relayflow.core.records import Effect, FlowRecord, Track, split_key
from relayflow.core.values import UnstorableValue, check_storable

log = logging.getLogger("relayflow.core.engine")
E = TypeVar("E", bound=StepError)
# One step's output when values are not offloaded (``core.payloads.INLINE``): the whole
# document stays under Firestore's 1 MiB with room to spare.
MAX_OUTPUT_BYTES = INLINE.output_bytes


@dataclass(frozen=True)
class Call:
    """One handler call: the flow at the step's position, the handler, what it is told, and
    what the step's breaker said before it (None: no breaker asked)."""

    record: FlowRecord
    handler: Handler
    context: StepContext
    verdict: Verdict | None
    # How large its output may be (larger when values are offloaded to a bucket).
    max_output_bytes: int = MAX_OUTPUT_BYTES


Next = Callable[[Call], Outcome]
Middleware = Callable[[Call, Next], Outcome]


class Execution:
    """Runs handlers through the middleware chain."""

    def __init__(self, kernel: Kernel, middleware: Sequence[Middleware] = ()) -> None:
        self._k = kernel
        self._chain = _chained(middleware)

    @classmethod
    def standard(cls, kernel: Kernel, breaker: Middleware) -> Execution:
        """The engine's chain, outermost first: retries counted, the ``breaker`` told, the
        call timed, then traced."""
        execution = cls(kernel)
        execution._chain = _chained((execution.counted, breaker, execution.timed, execution.traced))
        return execution

    def execute(
        self,
        flow: Flow,
        record: FlowRecord,
        verdict: Verdict | None = None,
        *,
        budget_s: float | None = None,
    ) -> Outcome:
        """Run the handler of the task at ``record``'s position and say how it ended: its
        output as the document stores it (``Kernel.stored``). A value it would be told that
        cannot be read fails it (PAYLOAD_MISSING, PAYLOAD_CORRUPT) without running it."""
        pos = record.position
        step = step_at(flow, pos, self._k.kinds)
        handler = self._k.kinds.of(step).handler(step, pos.kind)
        assert handler is not None, "a task the engine does itself has no handler"
        try:
            context = self.context(flow, record, budget_s)
        except PayloadUnavailable as exc:
            return Retry(exc)
        except UnreadableSealedValue as exc:  # retried, as the handler failing would be
            log.error("sealed value unreadable", extra={"flow_id": record.flow_id, "error": exc})
            return Retry(exc)
        except Unreadable as exc:  # a payload gone or not matching its reference
            return Failed(exc)
        outcome = self._chain(Call(record, handler, context, verdict, self._k.sizes.output_bytes))
        if isinstance(outcome, Completed) and outcome.output:
            where = f"output of {pos.step}"
            return self._k.stored(outcome.output, record, step=pos.step, where=where, checked=True)
        return outcome

    def context(self, flow: Flow, record: FlowRecord, budget_s: float | None = None) -> StepContext:
        """What a handler is told: the focused track's step, its try, its budget; the input
        and outputs as they were given (offloaded ones read back: PayloadMissing,
        PayloadCorrupt, PayloadUnavailable; sealed ones opened: UnreadableSealedValue)."""
        pos = record.position
        track = record.tracks.get(record.focus or "")
        outputs = record.outputs
        if track is not None and track.sent is not None:  # a callback's check sees what it sent
            outputs = {**outputs, pos.step: track.sent}
        effect = record.live_effect(pos.effect_name)
        if pos.undoing and effect is not None and effect.output is not None:
            outputs = {**outputs, pos.step: effect.output}  # what the action answered
        index = record.item_index
        item = None if index is None else record.items[record.cursor]["item"]
        if pos.scope is not None and not record.is_lane:  # an item's undo, run by its flow
            index, item = pos.item, effect.item if effect is not None else None
        now = self._k.clock.now()
        flow_input = self._k.loaded(record.input, record, "input")
        outputs = self._opened(record, outputs)
        return StepContext(
            # The caller's id (a lane's item sees its flow's), not the key.
            flow_id=split_key(record.parent)[1] if record.parent else record.flow_id,
            flow=record.flow,
            step=pos.step,
            input=flow_input,
            outputs=outputs,
            idempotency_key=idempotency_key(record, pos),
            attempt=pos.attempt,
            poll=pos.poll,
            version=record.version,
            generation=pos.generation,
            action_key=idempotency_key(record, pos.as_action()),
            deadline=now + timedelta(seconds=budget_s or self._k.budget_s(pos.kind)),
            clock=self._k.clock.now,
            callback_token=token_of(track, effect, pos),
            item=item,
            item_index=index,
        )

    def _opened(self, record: FlowRecord, outputs: dict[str, Any]) -> dict[str, Any]:
        """``outputs`` as the handler at ``record``'s position reads them. An item's undo run
        by its flow reads its item's output as the item's lane stored it (``Slot.scope``)."""
        pos = record.position
        item_of = pos.scope if pos.scope is not None and not record.is_lane else None
        return {
            k: self._k.loaded(v, record, "outputs", k, scope=item_of if k == pos.step else None)
            for k, v in outputs.items()
        }

    def traced(self, call: Call, then: Next) -> Outcome:
        """A span per handler call, named by the task, marked failed if it failed."""
        pos = call.record.position
        name = f"{pos.kind.value} {pos.step}"
        attributes = _span_attributes(call.record)
        with tracing.span(self._k.tracer, name, attributes=attributes) as span:
            outcome = then(call)
            _trace_outcome(span, outcome)
        return outcome

    def timed(self, call: Call, then: Next) -> Outcome:
        """How long the handler ran and how it ended, as the step's metric."""
        began = time.perf_counter()
        outcome = then(call)
        elapsed_s = time.perf_counter() - began
        record = call.record
        self._k.metrics.step_ran(record.flow, record.position, outcome_name(outcome), elapsed_s)
        return outcome

    def counted(self, call: Call, then: Next) -> Outcome:
        """Count a step's retries by the error's code."""
        outcome = then(call)
        if isinstance(outcome, Retry):
            record = call.record
            self._k.metrics.step_retried(record.flow, record.position.step, outcome.error.code)
        return outcome


def _chained(middleware: Sequence[Middleware]) -> Next:
    chain: Next = _scrubbed
    for outer in reversed(middleware):
        chain = _linked(outer, chain)
    return chain


def _linked(outer: Middleware, inner: Next) -> Next:
    return lambda call: outer(call, inner)


def _scrubbed(call: Call) -> Outcome:
    return scrubbed(run_handler(call))


def scrubbed(outcome: Outcome) -> Outcome:
    """``outcome`` with the values opened for its handler scrubbed from what it says (an
    error's message, a not-ready detail): that text goes to the history, a poll chain's task
    body, the result's error and spans, which are never sealed."""
    if isinstance(outcome, Waiting):
        detail = scrubbing.scrubbed(outcome.signal.detail)
        if detail == outcome.signal.detail:
            return outcome
        return Waiting(NotReady(detail, delay_s=outcome.signal.delay_s))
    if isinstance(outcome, Retry):
        return Retry(_scrubbed_error(outcome.error))
    if isinstance(outcome, Failed):
        return Failed(_scrubbed_error(outcome.error))
    return outcome


def _scrubbed_error(error: E) -> E:
    message = scrubbing.scrubbed(error.message)
    if message == error.message:
        return error
    shown = copy.copy(error)
    shown.message = message
    shown.args = (message,)
    return shown


def run_handler(call: Call) -> Outcome:
    """Run a handler and classify how it ended (invariant 7)."""
    context = call.context
    extra = {"flow_id": call.record.flow_id, "at": call.record.position.label()}
    try:
        output = call.handler(context)
    except NotReady as signal:
        log.info("not ready", extra={**extra, "detail": signal.detail})
        return Waiting(signal)
    except RetryableError as exc:
        log.warning("retryable error", extra={**extra, "error": exc.message})
        return Retry(exc)
    except PermanentError as exc:
        log.warning("permanent error", extra={**extra, "error": exc.message})
        return Failed(exc)
    except Exception as exc:  # a bug or an unclassified library error: retry, but bounded
        log.exception("handler raised an unexpected error", extra=extra)
        return Retry(RetryableError(f"{type(exc).__name__}: {exc}", code="UNEXPECTED"))
    return completed(output, where=f"output of {context.step}", max_bytes=call.max_output_bytes)


def completed(output: object, *, where: str, max_bytes: int = MAX_OUTPUT_BYTES) -> Outcome:
    """A handler's output, if a flow can store it; a permanent failure otherwise."""
    if output is None:
        return Completed({})
    if not isinstance(output, dict):
        message = f"{where} is a {type(output).__name__}; a handler returns a dict or None"
        return Failed(PermanentError(message, code="INVALID_OUTPUT"))
    try:
        check_storable(output, where=where, max_bytes=max_bytes)
    except UnstorableValue as exc:
        return Failed(PermanentError(str(exc), code="INVALID_OUTPUT"))
    return Completed(output)


def token_of(track: Track | None, effect: Effect | None, position: Position) -> str:
    """The callback token a handler is told: its step's, or for an undo, the one its run sent
    (so a replay of the run under its key sends the same request)."""
    if position.undoing:
        return (effect.token if effect is not None else None) or ""
    return (track.token if track is not None else None) or ""


def outcome_name(outcome: Outcome) -> str:
    """How a handler ended: completed, waiting, retry or failed."""
    return type(outcome).__name__.lower()


def _span_attributes(record: FlowRecord) -> dict[str, str | int]:
    pos = record.position
    return {
        "flow_id": record.flow_id,
        "flow": record.flow,
        "step": pos.step,
        "kind": pos.kind.value,
        "attempt": pos.attempt,
        "poll": pos.poll,
        "generation": pos.generation,
    }


def _trace_outcome(span: Span, outcome: Outcome) -> None:
    """Name how the handler ended on its span (completed, waiting, retry, failed)."""
    span.set_attribute("outcome", outcome_name(outcome))
    if isinstance(outcome, Retry | Failed):
        tracing.mark_error(span, outcome.error.message)
