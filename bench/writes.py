"""Bytes each Firestore write of a flow sends, as its history grows to its cap.

    python bench/writes.py [--polls 400] [--history-limit 200]

Runs one registration-shaped flow (an action, a poll that is not ready ``--polls`` times,
an action) through the real planner and engine in memory (relayflow.testing), and encodes
every write the store makes with the same protobuf encoder the Firestore store uses
(relayflow.gcp.documents): the whole document (what a whole-document update sent before) and
the fields that changed plus the history entries appended (what a write sends now). Prints
both at a few points as the history fills and after it is capped, and the ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.cloud.firestore_v1.types import document

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep
from relayflow.core.engine import Limits
from relayflow.core.records import FlowRecord
from relayflow.gcp import documents
from relayflow.testing import Harness
from relayflow.testing.memory import MemoryStore


def encoded_size(fields: dict[str, Any]) -> int:
    doc = document.Document.pb()()
    for key, value in fields.items():
        documents.encode(value, doc.fields[key])
    return int(doc.ByteSize())


class Measuring(MemoryStore):
    """A memory store that notes, for every write, the bytes of the whole document and of
    the fields that changed since the document as stored."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[tuple[int, int, int]] = []  # (history entries, whole, changed)

    def _write(self, record: FlowRecord) -> None:
        before = self.docs.get(record.flow_id)
        super()._write(record)
        after = self.docs[record.flow_id]
        whole = encoded_size(after)
        fields, appends = documents.write_of(before, after)
        changed = encoded_size(fields) + encoded_size(appends)
        self.sizes.append((len(record.history), whole, changed))


def flow(polls: int) -> Flow:
    state = {"n": 0}

    def check(ctx: Any) -> dict[str, Any]:
        state["n"] += 1
        if state["n"] <= polls:
            raise NotReady("PENDING")
        return {"state": "ACTIVE"}

    policy = PollPolicy(
        initial_s=1, multiplier=1.0, max_interval_s=1, max_polls=polls + 5, deadline_s=10 * polls
    )
    return Flow(
        name="reg",
        steps=(
            ActionStep("register", lambda ctx: {"id": "r-1", "detail": "x" * 200}),
            PollStep("await_active", check, policy=policy),
            ActionStep("create_entity", lambda ctx: {"entity": "e-1"}),
        ),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--polls", type=int, default=400)
    parser.add_argument("--history-limit", type=int, default=200)
    args = parser.parse_args()
    if args.polls < 1 or not 10 <= args.history_limit <= 2000:
        parser.error("--polls must be >= 1 and --history-limit in 10..2000")
    h = Harness(flow(args.polls), limits=Limits(history_limit=args.history_limit))
    store = Measuring()
    h.store = store
    h.engine = h._build()
    record = h.run(h.start("reg", {"resource": "bench"}))
    assert record is not None, "the flow did not end"
    print(f"flow {record.status}: {record.polls} polls, {len(store.sizes)} writes")
    print(f"{'write':>6} {'history':>8} {'whole doc B':>12} {'changed B':>10}")
    marks = {0, 1, 2, 10, 50, 100, len(store.sizes) - 1}
    marks |= {i for i, (n, _, _) in enumerate(store.sizes) if n == args.history_limit}
    shown = sorted(marks)[:12]
    for i in shown:
        entries, whole, changed = store.sizes[i]
        print(f"{i:>6} {entries:>8} {whole:>12} {changed:>10}")
    whole_total = sum(w for _, w, _ in store.sizes)
    changed_total = sum(c for _, _, c in store.sizes)
    capped = [(w, c) for n, w, c in store.sizes if n >= args.history_limit]
    print(
        f"bytes per write, whole flow: whole {whole_total / len(store.sizes):.0f}, changed "
        f"{changed_total / len(store.sizes):.0f} ({changed_total / whole_total:.2f}x)"
    )
    if capped:
        w = sum(x for x, _ in capped) / len(capped)
        c = sum(y for _, y in capped) / len(capped)
        print(f"bytes per write at the history cap: whole {w:.0f}, changed {c:.0f} ({c / w:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
