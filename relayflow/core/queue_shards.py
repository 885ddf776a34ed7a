"""The names and the bound of queue shards: each kind of Cloud Tasks queue (steps, polls and
their high twins) is ``shards`` queues, and a flow's tasks all go to its own.

A Cloud Tasks queue dispatches at most 500 tasks per second
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#ratelimits);
shards multiply that. Kept apart from the planner so that settings and the topology (read by
every entry point, the CLI too) name shards without loading the engine.
"""

from __future__ import annotations

# Cloud Tasks allows 1,000 queues per project and region by default
# (https://cloud.google.com/tasks/docs/quotas): four kinds of 250 shards each. A team that
# has the quota raised raises this with it.
MAX_QUEUE_SHARDS = 250


def shard_name(queue: str, shard: int) -> str:
    """The name of shard ``shard`` of the queue named ``queue``: shard 0 keeps the name (so a
    deployment that grows from one shard keeps its queue and the tasks in it), shard i >= 1
    is ``queue-i``."""
    if shard < 0:
        raise ValueError(f"a queue shard is 0 or more, not {shard}")
    return queue if shard == 0 else f"{queue}-{shard}"
