"""Flow shapes on the command line: ``relayflow graph FLOW`` (text or Mermaid), and where each
branch and item of a running flow is, for ``relayflow status``."""

from __future__ import annotations

import argparse
from typing import Any

from relayflow.core.flows import CallbackStep, Flow, ForEach, IfStep, PollStep
from relayflow.core.records import UNDO_TRACK, FlowRecord


def register(sub: Any, app_parent: argparse.ArgumentParser) -> None:
    """Add ``graph`` to the CLI."""
    graph = sub.add_parser(
        "graph", parents=[app_parent], help="print a flow's shape (text, or --mermaid)"
    )
    graph.add_argument("flow", help="flow name")
    graph.add_argument("--version", type=int, default=None, help="default: the newest")
    graph.add_argument("--mermaid", action="store_true", help="a Mermaid flowchart")


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


def running(record: FlowRecord) -> list[str]:
    """A line for each branch running now: its position, its next task, a ForEach's lanes."""
    lines = []
    for key, track in sorted(record.tracks.items()):
        what = "undoing" if key == UNDO_TRACK else "running"
        due = f", next {track.next.run_at.isoformat()}" if track.next else ""
        lines.append(f"  {what:<9} {track.position.label()}{due}")
        if track.fanout is not None:
            fan = track.fanout
            lines.append(
                f"            {fan.total} items in {fan.lanes} lanes: {len(fan.ended)} lanes "
                f"done, {len(fan.failed)} items failed"
            )
        if track.token is not None:
            lines.append("            waiting for its callback token to be completed")
    if record.skipped:
        lines.append(f"  skipped   {', '.join(record.skipped)}")
    return lines
