"""Flow definitions: an ordered list of steps (actions, polls, choices, callbacks, sleeps,
ForEach), each with its policy.

A flow is plain data plus handlers. Handlers receive a StepContext and return a JSON-able dict
(their output) or raise one of relayflow.core.errors: RetryableError, PermanentError, or — in a poll
step's check — NotReady. Flows live in an explicit Registry that each entry point builds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from relayflow.core.backoff import Jitter, compute_delay
from relayflow.core.errors import ConfigError, PermanentError, UnknownFlow, UnknownVersion
from relayflow.core.graph import Graph
from relayflow.core.position import STEP_NAME_PATTERN
from relayflow.core.schedules import Schedule
from relayflow.core.schedules import checked as checked_schedules
from relayflow.core.sensitive import Path, compiled

JSONDict = dict[str, Any]
_STEP_NAME = re.compile(STEP_NAME_PATTERN)
_FLOW_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_DEPENDENCY = re.compile(r"^[a-z][a-z0-9-]{0,62}$")  # relayflow.core.breaker_policy
# A pydantic model a handler reads its input as (``StepContext.input_as``).
M = TypeVar("M", bound=BaseModel)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class StepContext:
    """What a handler knows: whose flow, its input, what earlier steps produced, which try.

    ``idempotency_key`` goes with the external call: every retry of this step's effect sends
    the same key. In a compensation, ``action_key`` is the key the action itself sent, so an
    undo whose action's responses were all lost (``outputs`` has nothing for the step) can
    find the effect: replay the action under ``action_key`` to learn its id, then undo it.
    """

    flow_id: str
    flow: str
    step: str
    input: Mapping[str, Any]
    outputs: Mapping[str, Any]
    idempotency_key: str
    attempt: int = 0
    poll: int = 0
    version: int = 1
    generation: int = 0
    action_key: str = ""
    # When the handler's time is up (its queue's dispatch deadline less the commit's share):
    # long calls must end before it. See ``time_left_s``.
    deadline: datetime | None = None
    clock: Callable[[], datetime] = field(default=_utcnow, repr=False, compare=False)
    # A callback step's one-use token, to hand to the system that will report completion.
    callback_token: str = ""
    # In a ForEach's steps: the item, and its index in the list.
    item: Any = None
    item_index: int | None = None

    def input_as(self, model: type[M]) -> M:
        """The flow's input as ``model`` (usually the flow's ``input_model``, which checked it
        at the start): ``order = ctx.input_as(Order)``. An input that does not fit fails the
        flow (PermanentError ``INPUT_INVALID``): another try would read the same input."""
        try:
            return model.model_validate(dict(self.input))
        except ValidationError as exc:
            shown = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors()[:5]
            )
            raise PermanentError(
                f"the input of flow {self.flow!r} is not a {model.__name__}: {shown}",
                code="INPUT_INVALID",
            ) from None

    def time_left_s(self, *, cap_s: float | None = None, floor_s: float = 0.5) -> float:
        """Seconds left of the handler's budget (at most ``cap_s``, at least ``floor_s``), to
        bound an external call: ``call_json(..., timeout_s=ctx.time_left_s(cap_s=10))``."""
        left = math.inf
        if self.deadline is not None:
            left = (self.deadline - self.clock()).total_seconds()
        if cap_s is not None:
            left = min(left, cap_s)
        return max(left, floor_s)


Handler = Callable[[StepContext], JSONDict | None]


@dataclass(frozen=True)
class RetryPolicy:
    """How an action retries retryable errors: at most ``max_attempts`` tries in all."""

    max_attempts: int = 5
    initial_s: float = 1.0
    multiplier: float = 2.0
    max_interval_s: float = 60.0
    jitter: float = 0.2
    # Adaptive: the curve starts from the step's dependency's recent p95 latency (when that
    # is longer than ``initial_s``), so a slow dependency is not retried faster than it answers.
    adaptive: bool = False

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        _check_curve(self.initial_s, self.multiplier, self.max_interval_s, self.jitter)

    def delay_s(self, *, retry: int, key: str, initial_s: float | None = None) -> float:
        """Delay before retry number ``retry`` (0 = the first retry); ``initial_s`` moves the
        start of the curve (adaptive retries)."""
        start = initial_s or self.initial_s
        return compute_delay(
            n=retry,
            initial_s=start,
            multiplier=self.multiplier,
            max_interval_s=max(self.max_interval_s, start),
            jitter=self.jitter,
            key=key,
        )


@dataclass(frozen=True)
class PollPolicy:
    """How a poll step polls: exponential backoff with jitter, bounded by count and deadline."""

    initial_s: float = 1.0
    multiplier: float = 2.0
    max_interval_s: float = 30.0
    jitter: float = 0.2
    jitter_mode: Jitter = Jitter.PROPORTIONAL
    max_polls: int = 50
    deadline_s: float = 900.0

    def __post_init__(self) -> None:
        if self.max_polls < 1:
            raise ConfigError(f"max_polls must be >= 1, got {self.max_polls}")
        if self.deadline_s <= 0:
            raise ConfigError(f"deadline_s must be > 0, got {self.deadline_s}")
        _check_curve(self.initial_s, self.multiplier, self.max_interval_s, self.jitter)

    def delay_s(self, *, n: int, key: str) -> float:
        """Delay before poll ``n`` (poll 0 runs at once; poll 1 waits delay_s(n=0))."""
        return compute_delay(
            n=n,
            initial_s=self.initial_s,
            multiplier=self.multiplier,
            max_interval_s=self.max_interval_s,
            jitter=self.jitter,
            mode=self.jitter_mode,
            key=key,
        )


def _check_curve(initial_s: float, multiplier: float, max_interval_s: float, jitter: float) -> None:
    finite = all(math.isfinite(v) for v in (initial_s, multiplier, max_interval_s))
    ok = finite and initial_s > 0 and multiplier >= 1 and max_interval_s >= initial_s
    if not ok or not 0 <= jitter < 1:
        raise ConfigError(
            "backoff needs finite initial_s > 0, multiplier >= 1, max_interval_s >= initial_s "
            f"and 0 <= jitter < 1; got {initial_s=}, {multiplier=}, {max_interval_s=}, {jitter=}"
        )


def _check_dependency(step: str, dependency: str | None) -> None:
    if dependency is not None and not _DEPENDENCY.fullmatch(dependency):
        raise ConfigError(
            f"step {step!r}: dependency {dependency!r} must match [a-z][a-z0-9-]{{0,62}}"
        )


# ``after``, on every kind of step: the steps it runs after. None (the default) means "after
# the step listed before it" (a straight line); () means "at the start". Steps with no path
# between them run in parallel, each as its own task.
After = tuple[str, ...] | None


@dataclass(frozen=True)
class ActionStep:
    """A step that does something once (with retries), optionally undone by ``compensate``."""

    name: str
    run: Handler
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    compensate: Handler | None = None
    after: After = None
    # What the step (and its compensation) calls, e.g. "client-api": its breaker and retry
    # budget guard the calls (see relayflow.core.breakers).
    dependency: str | None = None

    def __post_init__(self) -> None:
        _check_dependency(self.name, self.dependency)


@dataclass(frozen=True)
class PollStep:
    """A step that checks an external operation until it is done; ``check`` raises NotReady.

    Retryable errors while checking (5xx, timeouts, 429 with Retry-After) are polled through
    with the poll backoff (or as long as Retry-After says) and do not use up ``max_polls``: they
    are bounded by the deadline. A check still failing at the deadline ends the flow FAILED
    (``POLL_ERRORS``): a broken endpoint is not a slow operation.
    """

    name: str
    check: Handler
    policy: PollPolicy = field(default_factory=PollPolicy)
    after: After = None
    dependency: str | None = None  # what ``check`` calls (see ActionStep)

    def __post_init__(self) -> None:
        _check_dependency(self.name, self.dependency)


Condition = Callable[[StepContext], bool]


@dataclass(frozen=True)
class IfStep:
    """A choice: ``condition`` (reading the input and the outputs so far, with no side effect)
    picks the branch that runs. The steps of ``then`` run if it is true, those of ``otherwise``
    if not; the branch not taken is recorded as skipped. A branch's steps run after the
    choice; a step after both branches runs once the branch taken is done (a skipped step
    counts as done for what comes after it)."""

    name: str
    condition: Condition
    then: tuple[str, ...] = ()
    otherwise: tuple[str, ...] = ()
    after: After = None


@dataclass(frozen=True)
class CallbackStep:
    """A step that waits for an external system to report completion.

    ``run`` is called first, like an action (claimed, retried, undone by ``compensate``), with
    a one-use token in ``ctx.callback_token`` to hand to the external system. The flow then
    waits, with no task running but a timeout, until the token is completed — by
    ``POST /callbacks`` on the api (the token in a header or the body, never the URL) or a
    message on ``flow-signals`` — and the step's output is what the completion carried. No
    completion within ``timeout_s`` ends the flow TIMED_OUT (``CALLBACK_TIMEOUT``).
    ``check``, if given, is a safety net for a completion that never comes: it is polled with
    ``policy`` while the step waits, and its output completes the step as a callback would
    (``NotReady``: keep waiting).
    """

    name: str
    run: Handler
    timeout_s: float = 900.0
    check: Handler | None = None
    policy: PollPolicy = field(
        default_factory=lambda: PollPolicy(initial_s=30.0, max_interval_s=300.0)
    )
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    compensate: Handler | None = None
    after: After = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise ConfigError(f"callback step {self.name!r}: timeout_s must be > 0")


# The longest sleep a step may ask for: ten years, so a wake time always fits a datetime (and
# a typo of a few zeros is refused rather than parking a flow for ever).
MAX_SLEEP_S = 3650 * 24 * 3600.0
WakeAt = Callable[[StepContext], datetime]


@dataclass(frozen=True)
class Sleep:
    """A durable timer: the flow waits ``seconds`` from when the step starts, or ``until`` the
    aware datetime that function returns (read from ``ctx.input`` and ``ctx.outputs``, with
    no side effect). Its output is ``{"slept_until": iso, "slept_s": n}``.

    A sleeping flow holds one Cloud Task, due at its wake time, and no worker. The wake time is
    fixed once, when the step starts (a retried or duplicate task does not move it); a time
    already past wakes at once. A wait longer than Cloud Tasks schedules ahead (30 days) is
    chained: one task after another, each at most ``planner.MAX_SCHEDULE_AHEAD_S`` on.
    """

    name: str
    seconds: float | None = field(default=None, kw_only=True)
    until: WakeAt | None = field(default=None, kw_only=True)
    after: After = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.until is None):
            raise ConfigError(f"sleep step {self.name!r}: give seconds= or until=, one of them")
        if self.until is not None and not callable(self.until):
            raise ConfigError(f"sleep step {self.name!r}: until must be a function of the context")
        seconds = self.seconds
        if seconds is None:
            return
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not number or not math.isfinite(seconds) or not 0 < seconds <= MAX_SLEEP_S:
            raise ConfigError(
                f"sleep step {self.name!r}: seconds must be a finite number > 0 and at most "
                f"{MAX_SLEEP_S:g} (ten years), got {seconds!r}"
            )


# A signal's name: what ``POST /flows/{id}/signals/{name}`` and the CLI name it by.
SIGNAL_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"
_SIGNAL_NAME = re.compile(SIGNAL_NAME_PATTERN)
# What a WaitForSignal does when its timeout passes with no signal.
ON_TIMEOUT = ("fail", "continue")


@dataclass(frozen=True)
class WaitForSignal:
    """Wait for a signal sent to the flow by its id (the api, the CLI, ``flow-signals``, the
    console's buttons): ``signal`` is its name, or several (``("approve", "reject")``), the
    first of them to come ending the wait. Its output is ``{"signal": name, "data": {...},
    "by": who, "reason": why, "signal_id": id | None, "at": iso}``.

    A signal sent before the flow reaches the step is kept on the flow's document and
    consumed when it gets there. The wait holds no worker, and one Cloud Task at most: its
    timeout (or the flow's deadline), none with neither. At ``timeout_s`` with no signal the
    step fails the flow TIMED_OUT (``SIGNAL_TIMEOUT``), or, with ``on_timeout="continue"``,
    ends with ``{"signal": None, "data": {}, "timed_out": True}``.
    """

    name: str
    signal: str | tuple[str, ...]
    timeout_s: float | None = field(default=None, kw_only=True)
    on_timeout: str = field(default="fail", kw_only=True)
    after: After = field(default=None, kw_only=True)
    # What its task runs: nothing of the flow's (the planner reads the document); the harness
    # wraps it to record the task's calls.
    arrived: Handler | None = field(default=None, kw_only=True, repr=False, compare=False)

    @property
    def signals(self) -> tuple[str, ...]:
        """The names of the signals it waits for."""
        return (self.signal,) if isinstance(self.signal, str) else tuple(self.signal)

    def __post_init__(self) -> None:
        names = self.signals
        if not names or not all(isinstance(n, str) and _SIGNAL_NAME.match(n) for n in names):
            raise ConfigError(
                f"signal step {self.name!r}: signal must be a name (or names) matching "
                f"{SIGNAL_NAME_PATTERN}, got {self.signal!r}"
            )
        if len(set(names)) != len(names):
            raise ConfigError(f"signal step {self.name!r}: signal repeats a name: {names}")
        if self.on_timeout not in ON_TIMEOUT:
            raise ConfigError(
                f"signal step {self.name!r}: on_timeout is one of {ON_TIMEOUT}, "
                f"got {self.on_timeout!r}"
            )
        timeout = self.timeout_s
        if timeout is None:
            return
        number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        if not number or not math.isfinite(timeout) or not 0 < timeout <= MAX_SLEEP_S:
            raise ConfigError(
                f"signal step {self.name!r}: timeout_s must be a finite number > 0 and at "
                f"most {MAX_SLEEP_S:g} (ten years), got {timeout!r}"
            )


ChildInput = Callable[[StepContext], JSONDict]


@dataclass(frozen=True)
class ChildFlow:
    """Start the registered flow ``flow`` (at ``version``; default: its newest) as a child,
    with the input ``input`` computes from the context (default: the parent's input), and
    wait — holding no task, woken by the child's end — for it to end. Its output is the
    child's output (its result's data); a child that fails, times out or is cancelled fails
    the step with the child's error, unless ``retry`` allows another try, which starts a
    fresh child. Undoing the step undoes the child (its saga, newest first), and the
    parent's undo goes on only once the child's is over. ``deadline_s``: the child's own
    deadline (the parent's bounds the wait in any case). See ``relayflow.core.kinds.child``.
    """

    name: str
    flow: str = field(kw_only=True)
    version: int | None = field(default=None, kw_only=True)
    input: ChildInput | None = field(default=None, kw_only=True)
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=1), kw_only=True)
    deadline_s: float | None = field(default=None, kw_only=True)
    after: After = field(default=None, kw_only=True)
    # Called (with the parent's context) as the engine begins to undo the child: set by the
    # harness to record the step's undo among the others (``Kind.wrapped``); not for flows.
    undo_note: Handler | None = field(default=None, kw_only=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.flow, str) or not _FLOW_NAME.match(self.flow):
            raise ConfigError(
                f"child step {self.name!r}: flow must be a flow name ({_FLOW_NAME.pattern})"
            )
        version = self.version
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ConfigError(f"child step {self.name!r}: version must be an integer or None")
        if self.input is not None and not callable(self.input):
            raise ConfigError(f"child step {self.name!r}: input must be a function of the context")
        deadline = self.deadline_s
        if deadline is not None and not (
            isinstance(deadline, int | float) and math.isfinite(deadline) and deadline > 0
        ):
            raise ConfigError(f"child step {self.name!r}: deadline_s must be a number > 0")


ItemsOf = Callable[[StepContext], Sequence[Any]]
# What a ForEach's items may run.
ItemStep = ActionStep | PollStep | CallbackStep | Sleep | WaitForSignal | ChildFlow


@dataclass(frozen=True)
class ForEach:
    """Run ``steps`` (actions, polls, callbacks, sleeps: a small flow of their own) once per
    item of the list ``items`` returns (read from the input or earlier outputs), at most
    ``concurrency`` items at a time. Each item has its own idempotency keys, retries and
    polls, and sees itself as ``ctx.item`` (``ctx.item_index``). The step's output is
    ``{"items": [each item's output, in the list's order], "failed": [indexes]}``.

    An item that fails for good has its own effects undone at once. More than ``tolerate``
    such items fail the flow: every item's and every step's effects are undone, newest first.
    Items run in ``concurrency`` lanes, one Firestore document each (lane k runs items k,
    k + concurrency, …), so they never contend for the flow's document.
    """

    name: str
    items: ItemsOf
    steps: tuple[ItemStep, ...]
    concurrency: int = 10
    tolerate: int = 0
    after: After = None
    # The items' steps as a flow of their own, each lane runs it (set in __post_init__).
    item_flow: Flow = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= 1000:
            raise ConfigError(f"ForEach {self.name!r}: concurrency must be in 1..1000")
        if self.tolerate < 0:
            raise ConfigError(f"ForEach {self.name!r}: tolerate must be >= 0")
        if not all(isinstance(s, ItemStep) for s in self.steps):
            raise ConfigError(
                f"ForEach {self.name!r}: its steps are actions, polls, callbacks, sleeps, "
                "signal waits or child flows"
            )
        flow = Flow(name=self.name.replace("_", "-"), steps=self.steps)
        object.__setattr__(self, "item_flow", flow)


Step = ActionStep | PollStep | IfStep | CallbackStep | Sleep | WaitForSignal | ForEach | ChildFlow
# Steps whose forward handler may have a side effect: claimed, retried, undone.
EffectStep = ActionStep | CallbackStep


@dataclass(frozen=True)
class Flow:
    """A named, versioned, ordered list of steps, with optional pydantic models for its input
    and its output.

    A flow runs to its end on the version it started on, as long as a deployment still
    registers that version; new starts take the newest version registered. ``input_model``
    checks the input when the flow starts (a start message that does not match is rejected);
    ``output_model`` checks the result when it would succeed: an output that does not match
    fails the flow (code ``OUTPUT_INVALID``, undoing what it did) instead of handing its
    callers something they cannot read. Their JSON Schemas are the flow's published contract
    (``GET /definitions``, ``relayflow graph --schema``).

    ``sensitive``: paths of values sealed before they are stored and shown redacted
    (``"input.card.number"``, ``"outputs.charge.token"``), besides the fields the models mark
    with ``Sensitive``; see ``relayflow.core.sensitive``.
    """

    name: str
    steps: tuple[Step, ...]
    input_model: type[BaseModel] | None = None
    description: str = ""
    version: int = 1
    output_model: type[BaseModel] | None = None
    sensitive: tuple[str, ...] = ()
    # The steps' dependencies, checked when the flow is defined (set in __post_init__).
    graph: Graph = field(init=False, repr=False, compare=False)
    # Every sensitive path: ``sensitive`` and the models' marks (set in __post_init__).
    sensitive_paths: tuple[Path, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _FLOW_NAME.match(self.name):
            raise ConfigError(f"flow name {self.name!r} must match {_FLOW_NAME.pattern}")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ConfigError(f"flow {self.name!r}: version must be an integer >= 1")
        if not self.steps:
            raise ConfigError(f"flow {self.name!r} has no steps")
        names = [s.name for s in self.steps]
        bad = [n for n in names if not _STEP_NAME.match(n)]
        if bad:
            raise ConfigError(f"step names {bad} must match {STEP_NAME_PATTERN}")
        if len(set(names)) != len(names):
            raise ConfigError(f"flow {self.name!r} repeats a step name: {names}")
        graph = Graph.of(self.name, self.steps)
        object.__setattr__(self, "graph", graph)
        if isinstance(self.sensitive, str):
            raise ConfigError(f"flow {self.name!r}: sensitive is a tuple of paths, not a string")
        paths = compiled(
            self.name,
            self.sensitive,
            steps=names,
            sinks=graph.sinks(),
            input_model=self.input_model,
            output_model=self.output_model,
        )
        object.__setattr__(self, "sensitive_paths", paths)

    @property
    def label(self) -> str:
        """``name v<version>``, as logs and errors name it."""
        return f"{self.name} v{self.version}"

    def step(self, index: int) -> Step:
        """The step at ``index``."""
        return self.steps[index]

    def index_of(self, name: str) -> int | None:
        """The index of the step called ``name``, or None if this flow has none."""
        return next((i for i, s in enumerate(self.steps) if s.name == name), None)

    def is_last(self, index: int) -> bool:
        """Whether ``index`` is the final step."""
        return index == len(self.steps) - 1

    def named(self, name: str) -> Step:
        """The step called ``name`` (KeyError if none)."""
        index = self.index_of(name)
        if index is None:
            raise KeyError(name)
        return self.steps[index]


class Registry:
    """The flows an entry point can run, by name and version. Built explicitly, never a
    module global."""

    def __init__(self, flows: Iterable[Flow] = (), *, schedules: Iterable[Schedule] = ()) -> None:
        self._flows: dict[str, dict[int, Flow]] = {}
        for flow in flows:
            self.register(flow)
        # Checked against the flows above: a bad one stops the build, naming itself.
        self._schedules = checked_schedules(schedules, self)

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        """The app's schedules, by name."""
        return tuple(self._schedules[name] for name in sorted(self._schedules))

    def register(self, flow: Flow) -> None:
        """Add a flow; a second flow of the same name and version is a configuration error."""
        if not isinstance(flow, Flow):
            raise ConfigError(f"a registry holds Flow objects, got a {type(flow).__name__}")
        versions = self._flows.setdefault(flow.name, {})
        if flow.version in versions:
            raise ConfigError(f"flow {flow.name!r} version {flow.version} is registered twice")
        versions[flow.version] = flow

    def get(self, name: str, version: int | None = None) -> Flow:
        """The flow called ``name`` at ``version`` (default: its newest).

        UnknownFlow lists the flows that exist; UnknownVersion (a kind of UnknownFlow) the
        versions of ``name`` that do.
        """
        versions = self._flows.get(name)
        if not versions:
            known = ", ".join(self.names()) or "none"
            raise UnknownFlow(f"unknown flow {name!r} (registered: {known})")
        if version is None:
            return versions[max(versions)]
        try:
            return versions[version]
        except KeyError:
            have = ", ".join(str(v) for v in sorted(versions))
            raise UnknownVersion(
                f"flow {name!r} has no version {version} any more (registered: {have})"
            ) from None

    def versions(self, name: str) -> list[int]:
        """The registered versions of ``name``, oldest first (empty if none)."""
        return sorted(self._flows.get(name, {}))

    def __contains__(self, name: object) -> bool:
        return name in self._flows

    def __iter__(self) -> Iterator[Flow]:
        """Every registered flow, each version, by name then version."""
        for name in self.names():
            versions = self._flows[name]
            yield from (versions[v] for v in sorted(versions))

    def __len__(self) -> int:
        return sum(len(v) for v in self._flows.values())

    def names(self) -> list[str]:
        """Registered flow names, sorted."""
        return sorted(self._flows)
