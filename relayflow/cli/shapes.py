"""Flow shapes on the command line: ``relayflow graph FLOW``, as text or Mermaid. (Where each
branch and item of a running flow is, ``relayflow status`` shows: relayflow.cli.render.)"""

from __future__ import annotations

from relayflow.core.flows import CallbackStep, Flow, ForEach, IfStep, PollStep


def render(flow: Flow, *, mermaid: bool) -> str:
    """The flow's graph, each step's kind named; a ForEach's item steps shown inside it."""
    if mermaid:
        lines: list[str] = [flow.graph.mermaid()]
        for step in flow.steps:
            if isinstance(step, ForEach):
                items = step.item_flow.graph.mermaid().splitlines()[1:]
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
        rows.append(f"{indent}{line}   [{_kind(step)}]")
        if isinstance(step, ForEach):
            rows += _rows(step.item_flow, indent=indent + "    ")
    return rows


def _kind(step: object) -> str:
    if isinstance(step, ForEach):
        return f"for each item, {step.concurrency} at a time, tolerating {step.tolerate}"
    if isinstance(step, IfStep):
        return (
            f"if: then {', '.join(step.then) or '-'}; otherwise {', '.join(step.otherwise) or '-'}"
        )
    if isinstance(step, CallbackStep):
        net = "with a safety-net poll" if step.check else "no safety net"
        return f"callback, timeout {step.timeout_s:g}s, {net}"
    return "poll" if isinstance(step, PollStep) else "action"
