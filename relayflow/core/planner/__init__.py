"""What a flow does next: pure functions from (definition, record, outcome, now) to a new record.

No I/O here. The engine reads the record, runs a handler, asks the planner for the next record,
and commits it in a transaction; everything about backoff, deadlines, retries, compensation and
results is decided in this package and unit-tested with a fixed clock.

A flow runs as tracks (records.Track): one per step running. Functions that act on the step
of one task take a record focused on its track (``FlowRecord.focused``); what they change of it
is stored back when the record is written. A step that completes ends its track and starts
one for each step that became ready (the graph says which), so steps with no path between them
run in parallel.

One module per topic, each building only on those before it: ``plan`` (the inputs and
outcomes), ``history``, ``states``, ``effects``, ``claims``, ``starts``, ``cleanup`` (undoing
after a flow ended), ``lanes``, ``saga`` (undoing before it ends), ``operations``,
``previews`` (what an operator's action would do, said first), ``reset`` (to a chosen step),
``forward`` (the dispatcher), ``endings``, ``recovery``, ``admission``, ``deferral``. What a
kind of step does with an outcome is its kind's (``relayflow.core.kinds``, reached through
``Plan.kinds``: the kinds build on the planner, never the other way round).
"""

from __future__ import annotations

from relayflow.core.planner.admission import admission_tried, admitted, await_admission
from relayflow.core.planner.claims import (
    claim,
    exhausted,
    first_claimed,
    first_claims,
    first_dispatch,
    holds,
    is_claimed,
    release,
)
from relayflow.core.planner.cleanup import abandon_cleanup
from relayflow.core.planner.deferral import defer
from relayflow.core.planner.effects import adopted, begin_effect
from relayflow.core.planner.endings import (
    abort,
    definition_gone,
    published,
    unknown_flow,
    unpublished,
)
from relayflow.core.planner.forward import after
from relayflow.core.planner.operations import (
    BulkMark,
    cancel,
    checked,
    restart,
    undo_again,
    undoable,
)
from relayflow.core.planner.plan import (
    MAX_RETRY_AFTER_S,
    MAX_SCHEDULE_AHEAD_S,
    Completed,
    Failed,
    Outcome,
    Plan,
    QueueNames,
    Retry,
    StepKind,
    StepKinds,
    Waiting,
    schedule,
    step_of,
)
from relayflow.core.planner.previews import Preview, preview_cancel, preview_retry
from relayflow.core.planner.recovery import crashed, lost, rescue, set_aside
from relayflow.core.planner.reset import preview_reset, reset
from relayflow.core.planner.starts import new_record
from relayflow.core.queue_shards import MAX_QUEUE_SHARDS, shard_name

__all__ = [
    "MAX_QUEUE_SHARDS",
    "MAX_RETRY_AFTER_S",
    "MAX_SCHEDULE_AHEAD_S",
    "BulkMark",
    "Completed",
    "Failed",
    "Outcome",
    "Plan",
    "Preview",
    "QueueNames",
    "Retry",
    "StepKind",
    "StepKinds",
    "Waiting",
    "abandon_cleanup",
    "abort",
    "admission_tried",
    "admitted",
    "adopted",
    "after",
    "await_admission",
    "begin_effect",
    "cancel",
    "checked",
    "claim",
    "crashed",
    "defer",
    "definition_gone",
    "exhausted",
    "first_claimed",
    "first_claims",
    "first_dispatch",
    "holds",
    "is_claimed",
    "lost",
    "new_record",
    "preview_cancel",
    "preview_reset",
    "preview_retry",
    "published",
    "release",
    "rescue",
    "reset",
    "restart",
    "schedule",
    "set_aside",
    "shard_name",
    "step_of",
    "undo_again",
    "undoable",
    "unknown_flow",
    "unpublished",
]
