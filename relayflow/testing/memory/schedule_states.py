"""Schedules' documents in a dict (``core.schedule_state.ScheduleStates``), changed by
compare-and-set on a version number as Firestore's are on their update time."""

from __future__ import annotations

from dataclasses import replace

from relayflow.core.schedule_state import ScheduleState


class MemoryScheduleStates:
    """Schedule documents, each with its version; ``writes`` counts the writes that landed."""

    def __init__(self) -> None:
        self.states: dict[str, ScheduleState] = {}
        self.writes = 0
        self.conflicts = 0

    def read(self, name: str) -> ScheduleState:
        return self.states.get(name) or ScheduleState(name)

    def write(self, state: ScheduleState) -> bool:
        current = self.states.get(state.name)
        if (current.version if current else None) != state.version:
            self.conflicts += 1
            return False
        self.writes += 1
        self.states[state.name] = replace(state, version=self.writes)
        return True

    def read_all(self) -> list[ScheduleState]:
        return sorted(self.states.values(), key=lambda s: s.name)
