"""The local scheduler's clock: the wall clock moved by an offset kept in a file of the
stack's state dir, so a test (or ``relayflow local clock``) makes a schedule's tick come
without waiting for it. Only the tick job reads it: flows run on the wall clock as ever."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from relayflow.core.clock import Clock, SystemClock

CLOCK_FILE = "scheduler-clock-offset-s"


class OffsetClock:
    """The wall clock plus the seconds written in ``path`` (none when it is absent)."""

    def __init__(self, path: Path, wall: Clock | None = None) -> None:
        self.path = path
        self._wall = wall or SystemClock()

    def offset_s(self) -> float:
        try:
            return float(self.path.read_text(encoding="utf-8").strip() or 0)
        except FileNotFoundError:
            return 0.0

    def now(self) -> datetime:
        return self._wall.now() + timedelta(seconds=self.offset_s())

    def set_offset(self, seconds: float) -> None:
        """Move the clock to the wall clock plus ``seconds`` (written whole, then renamed, so
        a reader never sees half a number)."""
        part = self.path.with_suffix(".part")
        part.write_text(f"{seconds!r}\n", encoding="utf-8")
        part.replace(self.path)

    def advance(self, seconds: float) -> None:
        self.set_offset(self.offset_s() + seconds)
