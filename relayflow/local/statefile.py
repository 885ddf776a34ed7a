"""What ``up`` started (PIDs, ports, health URLs), so ``down`` stops exactly those processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from relayflow.local.health import Probe


class ProcessRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    pid: int  # also the process-group id: each component leads its own session
    start_ticks: int | None  # tells our process from a later one that reuses the PID
    ports: tuple[int, ...]
    health_url: str
    probe: Probe
    log: str


class StackState(BaseModel):
    model_config = ConfigDict(frozen=True)

    base_port: int
    processes: tuple[ProcessRecord, ...] = ()
    # The queues provisioned of each kind, and the rate they were limited to (None: as
    # topology.json says): a component restarted later gets the same.
    queue_shards: int | None = None
    queue_rate: float | None = None

    def with_process(self, record: ProcessRecord) -> StackState:
        return self.model_copy(update={"processes": (*self.processes, record)})

    def without(self, name: str) -> StackState:
        kept = tuple(record for record in self.processes if record.name != name)
        return self.model_copy(update={"processes": kept})


def load(path: Path) -> StackState | None:
    """The recorded state, or None when there is none (or it is unreadable, e.g. half-written)."""
    try:
        return StackState.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


def save(path: Path, state: StackState) -> None:
    """Write atomically, so a crash mid-write never leaves a state that loses PIDs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.model_dump(mode="json"), indent=2), encoding="utf-8")
    os.replace(tmp, path)


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)
