"""Flow versions and the flows not ended on them: what ``GET /versions`` and the console's
Definitions page show, what ``relayflow versions check`` refuses to let a deploy drop, and what
``relayflow drain`` waits for.

A flow runs to its end on the version it started on, as long as the deployment registers that
version; a flow whose version is gone ends ``DEFINITION_CHANGED`` at its next task. So a
version may be removed only once no flow runs on it (README, "Changing a flow while flows
run"). Counting is one count aggregation per not-ended status of each version
(``Listing.count_by_status``), equality filters on ``flow``, ``version`` and ``status``, which
Firestore serves by merging their single-field indexes; ended flows, however many, are not
counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from relayflow.core.flows import Registry
from relayflow.core.listing import FlowFilter
from relayflow.core.ports import Listing
from relayflow.core.state import ACTIVE, Status

# The not-ended statuses, in the order a flow goes through them.
NOT_ENDED: tuple[Status, ...] = tuple(s for s in Status if s in ACTIVE)


@dataclass(frozen=True)
class VersionUse:
    """One version of a flow: whether the deployed app registers it (and starts new flows on
    it: ``newest``), and how many flows not ended run on it, by status."""

    flow: str
    version: int
    registered: bool
    newest: bool
    running: dict[Status, int]

    @property
    def total(self) -> int:
        return sum(self.running.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "version": self.version,
            "registered": self.registered,
            "newest": self.newest,
            "running": {s.value: self.running.get(s, 0) for s in NOT_ENDED},
            "total": self.total,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> VersionUse:
        """One item of ``GET /versions``; KeyError or ValueError if it is not one."""
        running = {Status(k): int(v) for k, v in dict(doc["running"]).items()}
        return cls(
            str(doc["flow"]),
            int(doc["version"]),
            bool(doc["registered"]),
            bool(doc["newest"]),
            running,
        )


def pairs(registry: Registry, flow: str | None = None) -> list[tuple[str, int]]:
    """Every version ``registry`` registers (of ``flow``), by name then version."""
    names = registry.names() if flow is None else [flow]
    return [(name, version) for name in names for version in registry.versions(name)]


def version_uses(
    listing: Listing, registry: Registry, asked: Iterable[tuple[str, int]]
) -> list[VersionUse]:
    """How many flows not ended run on each (flow, version) ``asked``, registered or not."""
    found = []
    for flow, version in asked:
        counts = listing.count_by_status(FlowFilter(flow=flow, version=version), statuses=NOT_ENDED)
        versions = registry.versions(flow)
        found.append(
            VersionUse(
                flow=flow,
                version=version,
                registered=version in versions,
                newest=bool(versions) and version == versions[-1],
                running={s: counts.get(s, 0) for s in NOT_ENDED},
            )
        )
    return found


Keeps = Callable[[str, int], bool]


def keeps(registry: Registry) -> Keeps:
    """Whether ``registry`` (the app about to be deployed) registers a flow's version."""
    return lambda flow, version: version in registry.versions(flow)


def dropped(uses: Iterable[VersionUse], kept: Keeps) -> list[VersionUse]:
    """Versions with flows not ended on them that the app about to be deployed drops: each
    such flow would end DEFINITION_CHANGED at its next task."""
    return [u for u in uses if u.total > 0 and not kept(u.flow, u.version)]


def dropped_newest(uses: Iterable[VersionUse], kept: Keeps) -> list[VersionUse]:
    """Idle versions the deployed app starts new flows on that the new app drops: flows
    started there while the new revision rolls out would end DEFINITION_CHANGED. (Deploy the
    version that replaces it first, then drain, then remove.)"""
    return [u for u in uses if u.total == 0 and u.newest and not kept(u.flow, u.version)]


__all__ = [
    "NOT_ENDED",
    "Keeps",
    "VersionUse",
    "dropped",
    "dropped_newest",
    "keeps",
    "pairs",
    "version_uses",
]
