"""The capacity model's arithmetic: a synthetic operation log in, known loads and ceilings out."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from relayflow.capacity import oplog
from relayflow.capacity.deployment import (
    CompositeIndex,
    Deployment,
    Indexes,
    QueueKind,
    Service,
    topology_parts,
)
from relayflow.capacity.model import (
    ShapeRun,
    mixed,
    parse_mix,
    ramp_minutes,
    requests_of,
    sizing,
    sustained_rate,
)
from relayflow.capacity.oplog import Op
from relayflow.capacity.report import answer, render
from relayflow.core.sharding import prefix_of

FLOWS = 10
COLLECTIONS = {
    "flows_collection": "flows",
    "lanes_collection": "flow_lanes",
    "breaker_windows_collection": "breaker_windows",
}


def deployment(**changes: Any) -> Deployment:
    base = Deployment(
        indexes=Indexes(
            exempt={"flows": frozenset({"expire_at"})},
            composites=(CompositeIndex("list", "flows", ("status", "updated_at")),),
        ),
        queues=(
            QueueKind("steps", "flow-steps", 1, 200.0),
            QueueKind("polls", "flow-polls", 2, 100.0),
        ),
        collections=COLLECTIONS,
        services=(
            Service("start-flow", 10),
            Service("worker", 10),
            Service("poller", 10),
        ),
    )
    return replace(base, **changes)


def op(op_kind: str, t: float, component: str = "relayflow-worker", **data: Any) -> Op:
    return Op(op_kind, component, t, t, data)


def flow_ops(i: int, doc_id: str) -> list[Op]:
    """One flow: a create and two updates of its document over 5 s, a step task, a poll task
    on each of the two poll shards, a create that was there already, a result and a start."""
    t = 100.0 * i
    write = oplog.FS_WRITE
    return [
        op(oplog.PUBLISH, t, "caller", topic="flow-requests", bytes=2500),
        op(
            write,
            t,
            coll="flows",
            id=doc_id,
            kind="create",
            fields=["created_at", "flow_id", "status", "updated_at"],
            ts=["created_at", "updated_at"],
        ),
        op(
            write,
            t + 2,
            coll="flows",
            id=doc_id,
            kind="update",
            fields=["status", "updated_at"],
            ts=["updated_at"],
        ),
        op(
            write, t + 5, coll="flows", id=doc_id, kind="update", fields=["result_published"], ts=[]
        ),
        op(oplog.FS_READ, t + 1, rpc="get", coll="flows", n=1),
        op(oplog.TASK_CREATE, t, queue="flow-steps", task="a", outcome="created"),
        op(oplog.TASK_CREATE, t, queue="flow-steps", task="a", outcome="exists"),
        op(oplog.TASK_CREATE, t + 1, queue="flow-polls", task="p0", outcome="created"),
        op(oplog.TASK_CREATE, t + 2, queue="flow-polls-1", task="p1", outcome="created"),
        op(oplog.PUBLISH, t + 4, topic="flow-results", bytes=500),
    ]


def run(ids: list[str] | None = None, **cpu: float) -> ShapeRun:
    ids = ids or [f"order-{i:06d}" for i in range(FLOWS)]
    ops = [o for i, doc in enumerate(ids) for o in flow_ops(i, doc)]
    return ShapeRun("reference", len(ids), ops, {"worker": 0.5, **cpu})


def rows(shape: ShapeRun, dep: Deployment | None = None, rate: float = 10.0) -> dict[str, Any]:
    result = answer({"reference": shape}, {"reference": 1.0}, dep or deployment(), rate)
    return {r.usage.key: r for r in result.rows}


def test_each_monotonic_index_takes_the_writes_that_move_it() -> None:
    found = rows(run())

    updated = found["firestore index: flows.updated_at single-field index"]
    assert updated.usage.per_flow == 2
    assert updated.ceiling == pytest.approx(250)
    assert found["firestore index: flows.created_at single-field index"].ceiling == 500
    # The composite's entry moves on every write of one of its fields once updated_at is set.
    assert found["firestore index: flows.updated_at in list"].usage.per_flow == 2
    assert "firestore index: flows.expire_at single-field index" not in found


def test_a_composite_led_by_shard_of_an_exempted_field_is_divided_by_the_shards() -> None:
    sharded = Indexes(
        exempt={"flows": frozenset({"updated_at", "created_at"})},
        composites=(CompositeIndex("list", "flows", ("shard", "status", "updated_at")),),
    )

    found = rows(run(), deployment(indexes=sharded, firestore_shards=8))

    assert "firestore index: flows.updated_at single-field index" not in found
    assert found["firestore index: flows.updated_at in list"].ceiling == pytest.approx(500 * 8 / 2)


def test_a_shard_first_composite_is_not_divided_while_the_single_field_index_stays() -> None:
    half = Indexes(composites=(CompositeIndex("list", "flows", ("shard", "updated_at")),))

    found = rows(run(), deployment(indexes=half, firestore_shards=8))

    assert found["firestore index: flows.updated_at in list"].ceiling == pytest.approx(250)


def test_ids_in_key_order_put_every_write_on_one_range_and_spread_ids_do_not() -> None:
    ordered = rows(run())["firestore key range: flows"]
    ids = [f"{prefix_of(f'order-{i:06d}')}:order-{i:06d}" for i in range(FLOWS)]
    spread = rows(run(ids))["firestore key range: flows"]

    assert ordered.usage.per_flow == 3
    assert ordered.ceiling == pytest.approx(500 / 3)
    assert spread.usage.per_flow == pytest.approx(3 / 256)


def test_a_flows_own_document_is_as_hot_whatever_the_rate() -> None:
    own = rows(run())["firestore document: a flow's own"]

    # Three writes in 5 s: the busiest 10 s of its life holds all three.
    assert own.usage.constant == pytest.approx(3 / 10)
    assert not own.scales
    assert own.ceiling == math.inf
    assert rows(run(), rate=1e6)["firestore document: a flow's own"].load == own.load


def test_a_burst_is_not_a_sustained_rate_but_a_write_a_second_is() -> None:
    burst = [0.0, 0.01, 0.02, 30.0]
    steady = [float(t) for t in range(60)]

    assert sustained_rate(burst) == pytest.approx(3 / 10)
    assert sustained_rate(steady) == pytest.approx(1.0)
    assert sustained_rate([5.0]) == pytest.approx(0.1)


def test_dispatches_are_per_shard_of_each_kind_against_the_configured_rate() -> None:
    found = rows(run())

    steps = found["cloud tasks dispatches: steps (per shard of 1)"]
    polls = found["cloud tasks dispatches: polls (per shard of 2)"]
    assert (steps.usage.per_flow, steps.usage.limit_value, steps.ceiling) == (1, 200, 200)
    assert (polls.usage.per_flow, polls.usage.limit_value, polls.ceiling) == (1, 100, 100)
    assert found["cloud tasks API requests"].ceiling == pytest.approx(100_000 / 4)


def test_a_configured_rate_above_500_is_held_to_500() -> None:
    fast = (QueueKind("steps", "flow-steps", 1, 5000.0), QueueKind("polls", "flow-polls", 2))

    steps = rows(run(), deployment(queues=fast))["cloud tasks dispatches: steps (per shard of 1)"]

    assert steps.usage.limit_value == 500


def test_each_message_counts_at_least_one_kilobyte_against_the_publish_quota() -> None:
    publish = rows(run())["pub/sub publisher throughput"]

    assert publish.usage.per_flow == pytest.approx(2.5 + 1.0)
    assert publish.ceiling == pytest.approx(50_000 / 3.5)


def test_cloud_run_vcpus_and_requests_follow_the_cpu_per_flow() -> None:
    found = rows(run())

    worker = found["cloud run vCPU: worker"]
    assert worker.usage.per_flow == pytest.approx(0.05)
    assert worker.ceiling == pytest.approx(10 / 0.05)
    assert found["cloud run requests in flight: worker"].ceiling == pytest.approx(800 / 0.4)
    assert found["cloud run vCPU: region, all services"].ceiling == pytest.approx(1000 / 0.05)
    assert requests_of(run(), deployment()) == {"start-flow": 1.0, "worker": 1.0, "poller": 2.0}


def test_a_breaker_window_takes_its_paced_rate_whatever_r_until_its_shard_outgrows_pacing() -> None:
    shape = run()
    window = op(oplog.FS_WRITE, 5.0, coll="breaker_windows", id="api.0", kind="update")
    shape = ShapeRun("reference", FLOWS, [*shape.ops, window], {"worker": 0.7, "poller": 0.7})

    paced = deployment(breaker_shards=4, breaker_writes_per_s=0.6, breaker_max_flush_s=3600.0)
    found = rows(shape, paced)

    # 0.07 s CPU per flow in each of two services at 70 %: 0.2 instances per flow/s, 0.05 per
    # shard; pacing holds a document at 0.6/s until a shard has 0.6 x 3600 = 2160 writers, and
    # the model charges the writers past it on top (the stricter reading of max(0.6, n/3600)).
    row = found["firestore document: breaker window (per shard of 4)"]
    assert row.usage.constant == pytest.approx(0.6)
    assert row.usage.per_flow == pytest.approx(0.2 / 4 / 3600)
    assert row.ceiling == pytest.approx((1.0 - 0.6) / (0.2 / 4 / 3600))  # 28,800 flows/s
    assert row.share <= 0.7  # within the target at the R the model was asked about
    assert "firestore document: hottest shared" not in found


def test_the_overall_ceiling_is_the_first_resource_to_saturate() -> None:
    result = answer({"reference": run()}, {"reference": 1.0}, deployment(), 80.0)

    assert result.ceiling == pytest.approx(100)
    assert result.first is not None
    assert result.first.usage.key == "cloud tasks dispatches: polls (per shard of 2)"
    assert not result.within_target  # polls at 80 % of their rate
    assert answer({"reference": run()}, {"reference": 1.0}, deployment(), 70.0).within_target
    text = render(result, {"reference": 1.0})
    assert "<- first to saturate" in text and "overall ceiling: 100 flows/s" in text


def test_a_mix_weights_each_shapes_figures() -> None:
    light = ShapeRun("dag", FLOWS, [o for o in run().ops if o.op != oplog.TASK_CREATE], {})
    runs = {"reference": run(), "dag": light}

    found = {u.key: u for u in mixed(runs, {"reference": 0.25, "dag": 0.75}, deployment())}

    assert found["cloud tasks dispatches: steps (per shard of 1)"].per_flow == pytest.approx(0.25)
    assert found["firestore index: flows.updated_at single-field index"].per_flow == 2
    with pytest.raises(ValueError, match="no run of shape"):
        mixed(runs, {"foreach": 1.0}, deployment())


def test_sizing_keeps_each_instance_at_70_percent_cpu() -> None:
    (worker,) = sizing({"reference": run()}, {"reference": 1.0}, deployment(), 1000.0)

    assert worker.service == "worker"
    assert worker.vcpu == pytest.approx(50)
    assert worker.instances == math.ceil(50 / 0.7)
    assert worker.threads == worker.concurrency == 8
    assert worker.requests_per_s == pytest.approx(1000)


def test_the_ramp_grows_by_half_every_five_minutes() -> None:
    assert ramp_minutes(400) == 0
    assert ramp_minutes(750) == 5
    assert ramp_minutes(500 * 1.5**2) == 10
    assert ramp_minutes(10_000) == 5 * math.ceil(math.log(20) / math.log(1.5))


def test_a_mix_is_read_as_shares() -> None:
    assert parse_mix("reference") == {"reference": 1.0}
    assert parse_mix("reference=3, dag=1") == {"reference": 0.75, "dag": 0.25}
    for bad in ("reference=x", "reference=-1", "reference=0"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_topology_without_shards_means_one_queue_each_and_no_firestore_shards() -> None:
    queues, collections, shards = topology_parts(
        {"queues": {"steps": {"name": "flow-steps"}}, "firestore": {"flows_collection": "flows"}}
    )
    assert queues == (QueueKind("steps", "flow-steps", 1, 500.0),)
    assert (collections, shards) == ({"flows_collection": "flows"}, None)

    queues, _, shards = topology_parts(
        {"queues": {"steps": {"name": "flow-steps", "shards": 4}}, "firestore": {"shards": 128}}
    )
    assert queues[0].shards == 4 and shards == 128
    assert queues[0].holds("flow-steps-3") and not queues[0].holds("flow-steps-4")
    with pytest.raises(ValueError, match=r"queues\.steps\.shards"):
        topology_parts({"queues": {"steps": {"name": "s", "shards": 0}}})


def test_a_line_that_is_not_an_operation_is_an_error_naming_it() -> None:
    good = '{"op": "fs.read", "c": "w", "t": 1, "m": 1, "coll": "flows", "n": 1}'
    assert oplog.parse([good, ""])[0].get("coll") == "flows"
    with pytest.raises(ValueError, match="log:2: not an operation record"):
        oplog.parse([good, '{"op": "fs.read"}'], "log")
    with pytest.raises(ValueError, match="unknown operation"):
        oplog.parse(['{"op": "x", "c": "w", "t": 1, "m": 1}'])
