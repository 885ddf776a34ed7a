"""What relayflow does with a kind of step, in one place per kind.

Every decision that depends on what a step is — which task runs it forward, which handler a
task of it runs, whether that task claims the step first, which time budget it has, whether a
stored position still fits the step, when the step would next be tried anyway, how the CLI
draws it, how the testing harness records its calls, and what the planner does with a task's
outcome (poll again, await a callback, retry an action) — is a method of its ``Kind``
(``relayflow.core.kinds``: one module per kind, registered in ``REGISTRY``). The engine, the
planner, the harness and the CLI ask the registry; they never test a step's class.

The kinds build on the planner (``relayflow.core.planner``), never the other way round: the
planner reaches them through ``Plan.kinds``, which ``Kinds`` fills (``planner.plan.StepKinds``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar

from relayflow.core.flows import Flow, Handler, PollPolicy, RetryPolicy, Step
from relayflow.core.planner.forward import advance, fail
from relayflow.core.planner.plan import Completed, Failed, Outcome, Plan, Retry, Waiting
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord

# What the harness wraps a handler with: (the step's name, the task it runs for, the handler).
Wrap = Callable[[str, TaskKind, Any], Any]


class Kind:
    """One kind of step. Subclasses set the class attributes and override what differs."""

    step_type: ClassVar[type]
    name: ClassVar[str]  # what the CLI and the docs call it: action, poll, if, callback, ...
    forward: ClassVar[TaskKind]  # the task that runs a step of this kind forward
    tasks: ClassVar[frozenset[TaskKind]]  # every task a step of this kind may have
    # Tasks whose handler may have a side effect: claimed before they run (invariant 4).
    claimed: ClassVar[frozenset[TaskKind]] = frozenset()
    # Tasks that wait (a poll, a callback's safety net): the poll queue's time budget.
    waiting: ClassVar[frozenset[TaskKind]] = frozenset()
    # Tasks the engine does itself, with no handler of the flow's (a ForEach's lanes).
    own: ClassVar[frozenset[TaskKind]] = frozenset()
    # Whether a step of this kind is handed a callback token when it starts.
    hands_token: ClassVar[bool] = False
    # Whether a ForEach item's output keeps what a step of this kind output (a child flow's
    # is kept in the child's own document: its ForEach's output is a summary).
    keeps_output: ClassVar[bool] = True

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        """The handler a task of ``step`` runs (None: a task the engine does itself)."""
        raise NotImplementedError

    def claims(self, task: TaskKind) -> bool:
        return task in self.claimed

    def waits(self, task: TaskKind) -> bool:
        return task in self.waiting

    def runs_itself(self, task: TaskKind) -> bool:
        """Whether the engine does ``task`` itself (no handler of the flow's runs)."""
        return task in self.own

    def retries(self, task: TaskKind) -> bool:
        """Whether a later try of ``task`` is a retry, which spends its dependency's retry
        budget (a poll's next check is the schedule, not a retry)."""
        return True

    @property
    def makes_effects(self) -> bool:
        """Whether running a step of this kind forward may have an effect in the world: its
        forward task is claimed first (and its effect noted as begun)."""
        return self.claims(self.forward)

    def fits(self, step: Step, position: Position) -> str:
        """Why a stored ``position`` does not fit ``step`` any more (its kind changed, its
        compensation is gone), or ''."""
        if not isinstance(step, self.step_type) or position.kind not in self.tasks:
            return f"step {step.name!r} changed kind"
        return ""

    def next_try_s(self, step: Step, position: Position, key: str) -> float:
        """How long the step would wait before its next try anyway (a put-off step waits at
        least this, so it never calls more often than it would have)."""
        return 0.0

    def dependency(self, step: Step) -> str | None:
        """What the step calls, whose breaker guards it."""
        found: str | None = getattr(step, "dependency", None)
        return found

    def compensation(self, step: Step) -> Handler | None:
        """The handler that undoes the step's effect, if it has one."""
        return None

    def retry(self, step: Step) -> RetryPolicy | None:
        """How a failed try of the step (or of its undo) is retried, if it is."""
        return None

    def policy(self, step: Step) -> PollPolicy | None:
        """The backoff its polls follow, if it is a poll (the console draws each wait
        against it)."""
        return None

    def deadline(self, plan: Plan, record: FlowRecord) -> datetime:
        """When the focused step's wait (a poll, a callback) must stop."""
        raise AssertionError(f"a {self.name} step does not wait")

    def after(self, plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
        """The record once ``outcome`` of the focused task, run forward, is taken into account:
        its output (``done``), a permanent error (the flow fails, undoing what it did), or a
        retryable error or not ready (``again``)."""
        if isinstance(outcome, Completed):
            return self.done(plan, record, outcome.output)
        if isinstance(outcome, Failed):
            return fail(plan, record, outcome.error)
        return self.again(plan, record, outcome)

    def done(self, plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
        """The focused task returned ``output``: by default the step is done."""
        return advance(plan, record, output)

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        """The focused task raised a retryable error or said not ready."""
        raise NotImplementedError

    def inner(self, step: Step) -> Flow | None:
        """The flow of steps a step of this kind runs inside it (a ForEach's item steps)."""
        return None

    def describe(self, step: Step) -> str:
        """How ``relayflow graph`` labels the step."""
        return self.name

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        """``step`` with every handler wrapped (the harness records its calls)."""
        raise NotImplementedError

    def with_steps(self, step: Step, steps: tuple[Step, ...]) -> Step:
        """``step`` with other steps inside it (only a kind with ``inner`` steps has them)."""
        raise AssertionError(f"{step.name!r} has no steps inside it")

    def scripted(self, step: Step, role: str, handler: Handler) -> Step:
        """``step`` with its ``role`` handler ("run" forward, "undo") replaced (the harness's
        ``script``); AssertionError if it has none."""
        raise AssertionError(f"{step.name!r} runs no handler of its own to script")


class Kinds:
    """The registered kinds, looked up by step or by task."""

    def __init__(self, kinds: Sequence[Kind]) -> None:
        self._kinds = tuple(kinds)
        self._by_task: dict[TaskKind, Kind] = {}
        for kind in self._kinds:
            for task in kind.tasks - {TaskKind.ACTION, TaskKind.COMPENSATE}:
                self._by_task.setdefault(task, kind)

    def claims(self, task: TaskKind) -> bool:
        """Whether ``task`` (of whichever kind has it) is claimed before it runs."""
        return any(kind.claims(task) for kind in self._kinds)

    def waits(self, task: TaskKind) -> bool:
        """Whether ``task`` waits on something outside (the poll queue's time budget)."""
        return any(kind.waits(task) for kind in self._kinds)

    def __iter__(self) -> Iterator[Kind]:
        return iter(self._kinds)

    def of(self, step: Step) -> Kind:
        """The kind of ``step``."""
        for kind in self._kinds:
            if isinstance(step, kind.step_type):
                return kind
        raise TypeError(f"no kind is registered for a {type(step).__name__}")

    def at(self, flow: Flow, position: Position) -> Kind:
        """The kind of the step ``position`` names in ``flow`` (its ForEach's, for an item)."""
        return self.of(step_at(flow, position, self))

    def inner(self, flow: Flow, scope: str) -> Flow:
        """The item steps of ``flow``'s ForEach ``scope``, as a flow."""
        found = self.of(flow.named(scope)).inner(flow.named(scope))
        if found is None:
            raise KeyError(f"{scope!r} of {flow.name!r} runs no steps inside it")
        return found

    def container(self, flow: Flow, scope: str | None) -> Flow:
        """Where the item steps of ``scope`` are defined: their own flow, unless ``flow`` is it
        already (a lane's plan)."""
        if scope is None or scope not in flow.graph.order:
            return flow
        return self.inner(flow, scope)

    def keep_outputs(self, flow: Flow) -> bool:
        """Whether the items of a ForEach whose item steps are ``flow`` keep their outputs
        (none of its steps is of a kind that keeps its output elsewhere)."""
        return all(self.of(step).keeps_output for step in flow.steps)

    def dependencies(self, flows: Iterable[Flow]) -> set[str]:
        """Every dependency a step of ``flows`` names (the steps inside them too)."""
        names: set[str] = set()
        for flow in flows:
            for step in flow.steps:
                kind = self.of(step)
                inner = kind.inner(step)
                if inner is not None:
                    names |= self.dependencies([inner])
                elif (dependency := kind.dependency(step)) is not None:
                    names.add(dependency)
        return names


def step_at(flow: Flow, position: Position, kinds: Kinds) -> Step:
    """The definition of the step a position names (inside its ForEach, for an item's)."""
    return kinds.container(flow, position.scope).step(position.step_index)
