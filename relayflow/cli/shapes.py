"""Flow shapes on the command line: ``relayflow graph FLOW``, as text or Mermaid. (Where each
branch and item of a running flow is, ``relayflow status`` shows: relayflow.cli.render.)"""

from __future__ import annotations

from collections.abc import Iterable

from relayflow.core.flows import Flow
from relayflow.core.kinds import REGISTRY
from relayflow.core.schedules import Schedule


def render(flow: Flow, *, mermaid: bool) -> str:
    """The flow's graph, each step's kind named; a ForEach's item steps shown inside it."""
    if mermaid:
        lines: list[str] = [flow.graph.mermaid()]
        for step in flow.steps:
            inner = REGISTRY.of(step).inner(step)
            if inner is not None:
                items = inner.graph.mermaid().splitlines()[1:]
                lines.append(f"    subgraph {step.name}_items [{step.name}: each item]")
                lines += [f"    {line.strip()}" for line in items]
                lines.append("    end")
                lines.append(f"    {step.name} -.-> {step.name}_items")
        return "\n".join(lines)
    header = f"{flow.name} v{flow.version}" + (f": {flow.description}" if flow.description else "")
    return "\n".join([header, *_rows(flow, indent="  ")])


def _rows(flow: Flow, *, indent: str) -> list[str]:
    rows = []
    for line, step in zip(flow.graph.text().splitlines(), flow.steps, strict=True):
        kind = REGISTRY.of(step)
        rows.append(f"{indent}{line}   [{kind.describe(step)}]")
        inner = kind.inner(step)
        if inner is not None:
            rows += _rows(inner, indent=indent + "    ")
    return rows


def scheduled(schedules: Iterable[Schedule], flow: str, *, mermaid: bool) -> list[str]:
    """A line for each schedule that starts ``flow`` (a Mermaid comment under ``mermaid``)."""
    lead = "%% " if mermaid else ""
    return [
        f"{lead}started by schedule {s.name}: {s.cron!r} {s.timezone} "
        f"(overlap {s.overlap.value}, catch-up {s.catch_up.mode.value})"
        for s in schedules
        if s.flow == flow
    ]
