"""A flow's shape: which step runs after which, checked once when the flow is defined.

Pure: the planner asks which steps are ready given what is done, skipped and running; the
CLI draws the graph (text and Mermaid).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from relayflow.core.errors import ConfigError


class _Step(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def after(self) -> tuple[str, ...] | None: ...


@dataclass(frozen=True)
class Graph:
    """Each step's dependencies, in definition order, and the branches of each choice."""

    order: tuple[str, ...]
    deps: dict[str, tuple[str, ...]]
    # choice -> (steps of its `then` branch, steps of its `otherwise` branch)
    branches: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]

    @classmethod
    def of(cls, flow: str, steps: Sequence[_Step]) -> Graph:
        """The graph of ``steps``; ConfigError naming the problem if it is not a DAG."""
        order = tuple(step.name for step in steps)
        branches = _branches(flow, steps, set(order))
        owner = {s: choice for choice, (a, b) in branches.items() for s in (*a, *b)}
        deps: dict[str, tuple[str, ...]] = {}
        for i, step in enumerate(steps):
            declared = step.after if step.after is not None else order[max(i - 1, 0) : i]
            unknown = [d for d in declared if d not in order]
            if unknown:
                raise ConfigError(f"flow {flow!r}: step {step.name!r} runs after unknown {unknown}")
            implied = (owner[step.name],) if step.name in owner else ()
            deps[step.name] = tuple(dict.fromkeys((*declared, *implied)))
        graph = cls(order, deps, branches)
        graph._check_acyclic(flow)
        return graph

    def ready(self, done: Iterable[str], skipped: Iterable[str], busy: Iterable[str]) -> list[str]:
        """Steps that may start now: not done, skipped or running, and everything they run
        after done or skipped. In definition order."""
        over = set(done) | set(skipped)
        taken = over | set(busy)
        return [s for s in self.order if s not in taken and set(self.deps[s]) <= over]

    def sinks(self) -> list[str]:
        """Steps nothing runs after: their outputs are the flow's result."""
        needed = {d for deps in self.deps.values() for d in deps}
        return [s for s in self.order if s not in needed]

    def skipped_by(self, choice: str, took_then: bool) -> list[str]:
        """The steps a choice's decision skips: the branch not taken."""
        then, otherwise = self.branches[choice]
        return list(otherwise if took_then else then)

    def mermaid(self) -> str:
        """The graph as a Mermaid flowchart."""
        lines = ["flowchart TD"]
        for step in self.order:
            shape = f"{step}{{{step}?}}" if step in self.branches else f"{step}[{step}]"
            lines.append(f"    {shape}")
        for step in self.order:
            for dep in self.deps[step]:
                label = self._edge_label(dep, step)
                lines.append(f"    {dep} -->{label} {step}")
        return "\n".join(lines)

    def text(self) -> str:
        """The graph as lines: ``step  <- after, after``."""
        width = max(len(s) for s in self.order)
        rows = []
        for step in self.order:
            deps = ", ".join(f"{d}{self._edge_label(d, step).strip()}" for d in self.deps[step])
            rows.append(f"{step:<{width}}  <- {deps or '(start)'}")
        return "\n".join(rows)

    def _edge_label(self, dep: str, step: str) -> str:
        if dep not in self.branches:
            return ""
        then, otherwise = self.branches[dep]
        if step in then:
            return "|then|"
        return "|otherwise|" if step in otherwise else ""

    def _check_acyclic(self, flow: str) -> None:
        visiting: set[str] = set()
        finished: set[str] = set()

        def visit(step: str, path: tuple[str, ...]) -> None:
            if step in finished:
                return
            if step in visiting:
                cycle = " -> ".join((*path[path.index(step) :], step))
                raise ConfigError(f"flow {flow!r} has a cycle: {cycle}")
            visiting.add(step)
            for dep in self.deps[step]:
                visit(dep, (*path, step))
            visiting.discard(step)
            finished.add(step)

        for step in self.order:
            visit(step, ())


def _branches(
    flow: str, steps: Sequence[_Step], names: set[str]
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    branches: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    seen: dict[str, str] = {}
    for step in steps:
        then = getattr(step, "then", None)
        otherwise = getattr(step, "otherwise", None)
        if then is None or otherwise is None:
            continue
        for member in (*then, *otherwise):
            if member not in names or member == step.name:
                raise ConfigError(f"flow {flow!r}: choice {step.name!r} names unknown {member!r}")
            if member in seen:
                raise ConfigError(
                    f"flow {flow!r}: step {member!r} is in a branch of both "
                    f"{seen[member]!r} and {step.name!r}; it could never be reached"
                    if seen[member] != step.name
                    else f"flow {flow!r}: step {member!r} is in both branches of {step.name!r}"
                )
            seen[member] = step.name
        branches[step.name] = (tuple(then), tuple(otherwise))
    return branches
