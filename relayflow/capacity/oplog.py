"""Reading the operation log ``relayflow.gcp.recording`` writes: one ``Op`` per line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FS_WRITE = "fs.write"
FS_READ = "fs.read"
TASK_CREATE = "tasks.create"
PUBLISH = "pubsub.publish"
KINDS = (FS_WRITE, FS_READ, TASK_CREATE, PUBLISH)


@dataclass(frozen=True)
class Op:
    """One recorded operation: its kind, the component, wall and monotonic time, its fields."""

    op: str
    component: str
    t: float
    m: float
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)


def parse(lines: Iterable[str], where: str = "ops log") -> list[Op]:
    """Ops from JSON lines (blank lines skipped); a line that is not an op is an error."""
    ops = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            kind, component = str(raw.pop("op")), str(raw.pop("c"))
            t, m = float(raw.pop("t")), float(raw.pop("m"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"{where}:{number}: not an operation record ({exc}): {line[:120]!r}"
            ) from None
        if kind not in KINDS:
            raise ValueError(f"{where}:{number}: unknown operation {kind!r}")
        ops.append(Op(kind, component, t, m, raw))
    return ops


def read(path: Path) -> list[Op]:
    with path.open(encoding="utf-8") as handle:
        return parse(handle, str(path))


def between(ops: Sequence[Op], start: float, end: float) -> list[Op]:
    """The ops whose wall time is in [start, end)."""
    return [op for op in ops if start <= op.t < end]


def of_kind(ops: Iterable[Op], kind: str) -> Iterator[Op]:
    return (op for op in ops if op.op == kind)
