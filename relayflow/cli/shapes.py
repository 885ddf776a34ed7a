"""Flow shapes on the command line: ``relayflow graph FLOW``, as text or Mermaid. (Where each
branch and item of a running flow is, ``relayflow status`` shows: relayflow.cli.render.)"""

from __future__ import annotations

from relayflow.core.flows import Flow
from relayflow.core.kinds import REGISTRY


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
