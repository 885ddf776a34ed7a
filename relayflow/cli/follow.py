"""What ``relayflow watch`` prints as a flow moves: each history entry once, and the polls a
poll chain has run that the flow's document has not recorded yet, marked as not yet written.

A poll chain writes its flow's document only at checkpoints (``core.planner.chain``); between
them its polls ride in the chain's newest task. The command reads them from there (as the api's
``polls_in_flight``) and hands them here with each document it sees; a poll shown in flight is
not shown again when a checkpoint writes it to the history. Everything here takes the JSON
form of records and history entries, so it is tested without Firestore or Cloud Tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from relayflow.cli import render

NOT_WRITTEN = "  (not yet written: carried by its poll chain)"


def entry_key(e: Mapping[str, Any]) -> tuple[Any, ...]:
    """What names one poll (or any entry) across its note in a task and its history entry:
    a carried note keeps its time, step and numbers, though not always all its text."""
    fields = ("generation", "step", "kind", "poll", "attempt", "at")
    return tuple(e.get(f) for f in fields)


class Follower:
    """The lines to print for each document and each read of the polls in flight, each entry
    once. Both come from different threads (the listener's and the command's), hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen = 0  # history entries the document has had, dropped ones included
        self._introduced = False  # its labels were printed
        self._in_flight: set[tuple[Any, ...]] = set()
        # Entries printed from a document: a read of the chain's task against an older
        # document can still find polls a checkpoint has written since.
        self._written: set[tuple[Any, ...]] = set()

    def document(self, record: Mapping[str, Any]) -> list[str]:
        """The lines for ``record`` (a flow's JSON): its history entries new since the last
        document, less the polls already shown in flight."""
        with self._lock:
            history = record.get("history") or []
            total = int(record.get("history_dropped") or 0) + len(history)
            new = history[max(0, len(history) - (total - self._seen)) :]
            self._seen = max(self._seen, total)
            # What it was started with, once: the labels people know it by.
            lines = [] if self._introduced else render.labelled(record)
            self._introduced = True
            for e in new:
                key = entry_key(e)
                self._written.add(key)
                if key not in self._in_flight:
                    lines.append(render.entry(e))
            return lines

    def polls_in_flight(self, entries: Sequence[Mapping[str, Any]]) -> list[str]:
        """The lines for the polls in flight not shown yet, each marked not yet written."""
        with self._lock:
            lines = []
            for e in entries:
                key = entry_key(e)
                if key not in self._in_flight and key not in self._written:
                    self._in_flight.add(key)
                    lines.append(render.entry(e) + NOT_WRITTEN)
            return lines
