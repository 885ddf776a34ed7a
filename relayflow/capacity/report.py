"""The capacity model's answer as text: one line per resource, the ceiling, the sizing."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from relayflow.capacity import limits, rules
from relayflow.capacity.deployment import Deployment
from relayflow.capacity.model import (
    Mix,
    Row,
    ShapeRun,
    Sizing,
    firestore_ops_per_flow,
    mixed,
    ramp_minutes,
    sizing,
)


@dataclass(frozen=True)
class Answer:
    """Every resource at the target rate, the ceiling and the sizing it implies."""

    rate: float
    rows: list[Row]
    sizes: list[Sizing]
    firestore_ops_per_flow: float

    @property
    def ceiling(self) -> float:
        """The lowest ceiling of the resources whose load grows with R."""
        return min((r.ceiling for r in self.rows if r.scales), default=math.inf)

    @property
    def first(self) -> Row | None:
        return min((r for r in self.rows if r.scales), key=lambda r: r.ceiling, default=None)

    @property
    def over_at_any_rate(self) -> list[Row]:
        """Resources over their limit whatever R is (a flow's own document)."""
        return [r for r in self.rows if not r.scales and r.share > 1]

    @property
    def within_target(self) -> bool:
        return all(r.share <= limits.TARGET_SHARE for r in self.rows)


def answer(runs: Mapping[str, ShapeRun], mix: Mix, deployment: Deployment, rate: float) -> Answer:
    if not rate > 0:
        raise ValueError(f"the target rate must be > 0 flows/s, not {rate}")
    rows = sorted(
        (Row(u, rate) for u in mixed(runs, mix, deployment)),
        key=lambda r: (r.scales, r.ceiling),
    )
    return Answer(
        rate, rows, sizing(runs, mix, deployment, rate), firestore_ops_per_flow(runs, mix)
    )


def _num(value: float) -> str:
    if math.isinf(value):
        return "unbounded"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def render(result: Answer, mix: Mix) -> str:
    """The table, the sources of its limits, the verdict and the sizing."""
    sources: list[str] = []
    width = max((len(r.usage.key) for r in result.rows), default=10)
    mix_text = ", ".join(f"{k} {v:.0%}" for k, v in mix.items())
    lines = [
        f"capacity at R = {result.rate:,.0f} flows/s (mix: {mix_text})",
        f"{'resource':<{width}}  {'load at R':>12}  {'limit':>10}  {'use %':>8}  "
        f"{'headroom':>9}  {'ceiling R':>11}  src  detail",
    ]
    first = result.first
    for row in result.rows:
        u = row.usage
        if u.limit.source not in sources:
            sources.append(u.limit.source)
        mark = "  <- first to saturate" if row is first else ""
        ceiling = _num(row.ceiling) if row.scales else "any R"
        if not row.scales:
            mark = "  (independent of R" + (": over its limit)" if row.share > 1 else ")")
        lines.append(
            f"{u.key:<{width}}  {_num(row.load):>12}  {_num(u.limit_value):>10}  "
            f"{row.share * 100:>7.1f}%  {(1 - row.share) * 100:>8.1f}%  "
            f"{ceiling:>11}  [{sources.index(u.limit.source) + 1}]  {u.detail}{mark}"
        )
    verdict = "yes" if result.within_target else "no"
    ops = result.firestore_ops_per_flow * result.rate
    lines += [
        "",
        f"overall ceiling: {_num(result.ceiling)} flows/s"
        + (f" (first to saturate: {first.usage.key})" if first else ""),
        f"every resource <= {limits.TARGET_SHARE:.0%} of its limit at R: {verdict}",
        *(
            f"over its limit at any R: {r.usage.key} ({r.usage.detail})"
            for r in result.over_at_any_rate
        ),
        f"firestore: {result.firestore_ops_per_flow:.2f} ops/flow, {_num(ops)} ops/s at R; the "
        f"500/50/5 ramp takes {ramp_minutes(ops):.0f} min from 500 ops/s [ramp: "
        f"{limits.FIRESTORE_RAMP.source}]",
        "",
        "cloud run sizing at R (instances at 70 % CPU; threads = concurrency):",
    ]
    lines += [
        f"  {s.service:<11} {s.requests_per_s:>10,.0f} req/s  {s.vcpu:>8,.1f} vCPU  "
        f"{s.instances:>6,} instances  {s.threads} threads  concurrency {s.concurrency}"
        for s in result.sizes
    ]
    lines += ["", "limits' sources:"]
    lines += [f"  [{i}] {source}" for i, source in enumerate(sources, 1)]
    return "\n".join(lines)


def hotspots(deployment: Deployment) -> list[str]:
    """The hotspot rules' findings on the configuration (the guard test's), as text."""
    monotonic = rules.monotonic_fields(deployment.collections)
    return [str(f) for f in rules.index_findings(deployment.indexes, monotonic)]
