"""CPU time of the local stack's components, read from /proc (Linux only).

A component is the process the stack recorded (its PID, also its process-group id: each
component leads its own session) and every process below it: its descendants by parent PID
(gunicorn's worker under the arbiter, the JVM under the gcloud wrapper) and any other member of
its process group (a child that outlived its parent is re-parented to init but keeps its group).

A process's CPU time is ``utime + stime`` (fields 14 and 15 of /proc/<pid>/stat) plus
``cutime + cstime`` (16 and 17: the CPU time of its children that exited and were waited for),
so CPU spent by a child that exits between two readings is still counted once: in the child
while it lives, in its parent's ``cutime`` after it is reaped. All four are in clock ticks
(``SC_CLK_TCK``, usually 100 per second): a reading is good to 10 ms per process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat that CPU accounting needs."""

    pid: int
    ppid: int
    pgid: int
    cpu_ticks: int  # utime + stime + cutime + cstime


def parse_stat(pid: int, text: str) -> ProcStat:
    """One /proc/<pid>/stat line (the command name may hold spaces and parentheses)."""
    fields = text.rpartition(")")[2].split()
    # fields[0] is field 3 (state): field k of proc(5) is fields[k - 3].
    ppid, pgid = int(fields[1]), int(fields[2])
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return ProcStat(pid=pid, ppid=ppid, pgid=pgid, cpu_ticks=utime + stime + cutime + cstime)


def read_all(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every process's stat, by PID; a process that exits while we read is skipped."""
    stats: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        stats[int(entry.name)] = parse_stat(int(entry.name), text)
    return stats


def members(root: int, stats: Mapping[int, ProcStat]) -> set[int]:
    """``root``, every process in its process group, and their descendants by parent PID."""
    children: dict[int, list[int]] = {}
    for stat in stats.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    pending = [pid for pid, stat in stats.items() if stat.pgid == root or pid == root]
    found: set[int] = set()
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.add(pid)
            pending.extend(children.get(pid, ()))
    return found


def cpu_seconds(roots: Mapping[str, int], proc: Path = PROC) -> dict[str, float]:
    """CPU seconds used so far by each named component (``name -> recorded PID``).

    A process under two roots counts for the first one only, so totals never double count.
    """
    stats = read_all(proc)
    seen: set[int] = set()
    result: dict[str, float] = {}
    for name, root in roots.items():
        pids = members(root, stats) - seen
        seen |= pids
        result[name] = sum(stats[pid].cpu_ticks for pid in pids) / TICKS_PER_S
    return result


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds each component used between two readings (never negative)."""
    return {name: max(0.0, after[name] - before.get(name, 0.0)) for name in after}


def total(seconds: Mapping[str, float], names: Iterable[str]) -> float:
    """The sum over ``names`` (missing names count 0)."""
    return sum(seconds.get(name, 0.0) for name in names)
