"""Refused messages and tasks in a dict, apart from the flows (``core.ports.Rejections``);
a test reads them in ``rejected``."""

from __future__ import annotations

from typing import Any

from relayflow.testing.memory.base import MemoryBase


class MemoryRejections(MemoryBase):
    """The ``rejected`` records, by id."""

    def reject(self, doc_id: str, record: dict[str, Any]) -> None:
        self.rejected[doc_id] = dict(record)
