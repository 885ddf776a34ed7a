"""What an operator's action would do to one flow, said before it is done: a dry run's row.

Every operation that can run over many flows (retry, cancel, reset to a step) has a preview
built from the same planner functions as the operation itself, so what a dry run lists is what
the action then does. A preview is pure: a flow's document and its definition in, a
``Preview`` out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preview:
    """What ``action`` would do to the flow ``key`` now.

    ``allowed`` is False (and ``reason`` says why) when the action would be refused, e.g. a
    retry of a flow that is still running. Effects are named by the step that made them (a
    ForEach item's as ``step[item]``), newest first where order matters: ``undone`` in the
    order the undos would run.
    """

    key: str
    action: str
    allowed: bool
    reason: str = ""
    rerun: tuple[str, ...] = ()  # steps that would run (again), in definition order
    undone: tuple[str, ...] = ()  # effects that would be undone, newest first
    kept: tuple[str, ...] = ()  # effects that would stay live
    detail: dict[str, Any] = field(default_factory=dict)  # the action's own facts

    def as_json(self) -> dict[str, Any]:
        """The preview as the api, the CLI and the console show it."""
        return {
            "key": self.key,
            "action": self.action,
            "allowed": self.allowed,
            "reason": self.reason,
            "rerun": list(self.rerun),
            "undone": list(self.undone),
            "kept": list(self.kept),
            **({"detail": self.detail} if self.detail else {}),
        }
