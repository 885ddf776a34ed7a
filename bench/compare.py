"""Run bench/e2e_flows.py on an older revision and on this tree, side by side, and print what
each request costs in CPU and each flow in Firestore operations, with the ratio new / old.

    python bench/compare.py --old REV [--rounds 2] [--flows 200] [--base-port 8320]

The old revision is checked out into a temporary git worktree (removed after) and run with the
same interpreter and packages, its own code first on PYTHONPATH (so the stack's processes, which
inherit it, run the old code too). Rounds alternate old, new, old, new… so that a machine
getting slower or faster during the run weighs on both; the ratio is of the medians. A figure
within a few per cent of 1.00 is noise on a shared 2-core machine (the same code's CPU per
request varies by about ±5 % from one run to the next).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RAW = ("wall_s", "polls_per_flow", "per_flow", "cpu_ms_per_request")
# (label, path in e2e_flows.py's JSON)
FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cpu ms / start request", ("cpu_ms_per_request", "start")),
    ("cpu ms / action request", ("cpu_ms_per_request", "action")),
    ("cpu ms / poll request", ("cpu_ms_per_request", "poll")),
    ("polls / flow", ("polls_per_flow",)),
    ("firestore writes / flow", ("per_flow", "firestore_writes")),
    ("firestore reads / flow", ("per_flow", "firestore_reads")),
    ("tasks created / flow", ("per_flow", "tasks_created")),
    ("wall s", ("wall_s",)),
)


def run_once(tree: Path, flows: int, base_port: int) -> dict[str, Any]:
    """One e2e_flows run of the code in ``tree``; its JSON summary."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, str(tree / "bench" / "e2e_flows.py"), "--flows", str(flows)]
    argv += ["--base-port", str(base_port)]
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    start = done.stdout.find("{")
    if done.returncode != 0 or start < 0:
        raise SystemExit(
            f"e2e_flows.py failed in {tree} ({done.returncode}):\n{done.stdout}\n"
            f"{done.stderr[-4000:]}"
        )
    summary: dict[str, Any] = json.loads(done.stdout[start:])
    return summary


def figure(summary: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = summary
    for key in path:
        value = value[key]
    return float(value)


def beyond_polls(summary: dict[str, Any], key: str) -> float:
    """A per-flow figure less the flow's polls: each poll costs one write and one task, and how
    many polls a flow makes depends on when its registration turns active, not on the code."""
    return figure(summary, ("per_flow", key)) - figure(summary, ("polls_per_flow",))


def table(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str:
    lines = [f"{'':26} {'old':>9} {'new':>9} {'new/old':>8}   (medians of {len(old)} runs each)"]
    rows: list[tuple[str, list[float], list[float]]] = [
        (label, [figure(s, path) for s in old], [figure(s, path) for s in new])
        for label, path in FIGURES
    ]
    for key in ("firestore_writes", "tasks_created"):
        label = f"{key.replace('_', ' ')} - polls"
        rows.append(
            (label, [beyond_polls(s, key) for s in old], [beyond_polls(s, key) for s in new])
        )
    for label, olds, news in rows:
        o, n = statistics.median(olds), statistics.median(news)
        ratio = f"{n / o:8.2f}" if o else "       -"
        lines.append(f"{label:26} {o:9.2f} {n:9.2f} {ratio}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="the revision to compare with (git rev)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--flows", type=int, default=200)
    parser.add_argument("--base-port", type=int, default=8320)
    args = parser.parse_args()
    if not 1 <= args.rounds <= 10:
        parser.error("--rounds must be in 1..10")
    with tempfile.TemporaryDirectory(prefix="relayflow-old-") as parent:
        old_tree = Path(parent) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old_tree), args.old],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        try:
            old: list[dict[str, Any]] = []
            new: list[dict[str, Any]] = []
            for n in range(args.rounds):
                for label, tree, into in (("old", old_tree, old), ("new", REPO, new)):
                    print(f"round {n + 1}/{args.rounds}: {label} …", flush=True)
                    into.append(run_once(tree, args.flows, args.base_port))
            for label, runs in (("old", old), ("new", new)):
                for summary in runs:  # every run's own figures, before their medians
                    print(label, json.dumps({k: summary[k] for k in RAW}))
            print(table(old, new))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old_tree)], cwd=REPO, check=False
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
