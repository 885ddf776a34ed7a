"""Queue shards: a flow's tasks all go to its own shard's queues, a lane to its own; records
from before shards run on shard 0; counts are validated where they are read."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench.shards import Result, kind_of, per_shard
from relayflow.core import planner
from relayflow.core.kinds import REGISTRY
from relayflow.core.kinds.foreach import fanned_out, lane_id, new_lane
from relayflow.core.planner import Completed, Plan, QueueNames, shard_name
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord
from relayflow.core.sharding import shard_of
from relayflow.local.commands import queue_shards_of
from relayflow.local.environment import child_env, relayflow_env
from relayflow.local.ports import Ports
from relayflow.local.stack import Stack
from relayflow.runtime import queue_names, task_targets
from relayflow.settings import load_settings
from relayflow.topology import Queues, load_topology, with_queue_shards
from tests.unit.kinds.test_foreach import BATCH, EACH, ITEMS
from tests.unit.planner.sample import FLOW, NOW, QUEUES

SHARDED = replace(QUEUES, shards=8, steps_high="q-steps-high", polls_high="q-polls-high")


def sharded_plan(queues: QueueNames = SHARDED) -> Plan:
    return Plan(definition=FLOW, queues=queues, now=NOW, kinds=REGISTRY)


def test_shard_zero_keeps_the_queues_name_and_the_others_are_numbered() -> None:
    assert shard_name("flow-steps", 0) == "flow-steps"
    assert shard_name("flow-steps", 3) == "flow-steps-3"
    with pytest.raises(ValueError, match="0 or more"):
        shard_name("flow-steps", -1)


def test_each_kind_and_priority_has_its_shards() -> None:
    assert SHARDED.for_kind(TaskKind.ACTION, "low", 5) == "q-steps-5"
    assert SHARDED.for_kind(TaskKind.POLL, "low", 5) == "q-polls-5"
    assert SHARDED.for_kind(TaskKind.POLL, "high", 2) == "q-polls-high-2"
    assert SHARDED.for_kind(TaskKind.ACTION, "high", 0) == "q-steps-high"
    # A record from before shards (None) is on shard 0: the queue it always used.
    assert SHARDED.for_kind(TaskKind.ACTION, "low", None) == "q-steps"


def test_a_shard_past_a_lowered_count_goes_to_shard_mod_count_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lowered = replace(SHARDED, shards=3)
    with caplog.at_level(logging.WARNING, logger="relayflow.core.planner.plan"):
        assert lowered.for_kind(TaskKind.ACTION, "low", 7) == "q-steps-1"
        assert lowered.for_kind(TaskKind.POLL, "low", 7) == "q-polls-1"
    warned = [r for r in caplog.records if "count was lowered" in r.getMessage()]
    assert len(warned) == 1


@pytest.mark.parametrize("shards", [0, -1, 251])
def test_queue_names_refuse_a_bad_count(shards: int) -> None:
    with pytest.raises(ValueError, match=r"queue shards must be 1\.\.250"):
        QueueNames(shards=shards)


def test_a_new_flow_gets_its_shard_from_its_key_and_all_its_tasks_go_there() -> None:
    plan = sharded_plan()
    record = planner.new_record(
        plan, flow_id="order-42", input={}, message_id=None, deadline_s=None
    )
    assert record.queue_shard == shard_of("order-42", 8)
    shard = record.queue_shard
    assert record.next is not None and record.next.queue == shard_name("q-steps", shard)
    # Its poll and the action after it: the same shard, so names still deduplicate.
    at_poll = planner.after(plan, record, Completed({"reservation": "r"}))
    assert at_poll.next is not None and at_poll.next.queue == shard_name("q-polls", shard)
    at_finish = planner.after(plan, at_poll, Completed({"state": "READY"}))
    assert at_finish.next is not None and at_finish.next.queue == shard_name("q-steps", shard)
    # Stored, and read back the same.
    assert FlowRecord.from_doc(at_finish.to_doc()).queue_shard == shard


def test_a_tenants_flow_is_sharded_by_its_key_and_a_waiting_one_keeps_its_shard() -> None:
    plan = sharded_plan()
    record = planner.new_record(
        plan, flow_id="f-1", input={}, message_id=None, deadline_s=None, tenant="acme",
        waiting=True,
    )  # fmt: skip
    assert record.queue_shard == shard_of("acme~f-1", 8)


def test_flows_spread_over_every_shard_evenly() -> None:
    plan = sharded_plan()
    counts = [0] * 8
    for i in range(4000):
        key = f"order-{i:06d}"  # sequential ids, as callers choose them
        record = planner.new_record(plan, flow_id=key, input={}, message_id=None, deadline_s=None)
        assert record.queue_shard is not None
        counts[record.queue_shard] += 1
    assert max(counts) / (sum(counts) / 8) <= 1.1


def test_a_record_written_before_shards_runs_on_shard_zero() -> None:
    plan = sharded_plan()
    record = planner.new_record(plan, flow_id="old-1", input={}, message_id=None, deadline_s=None)
    doc = record.to_doc()
    del doc["queue_shard"]
    legacy = FlowRecord.from_doc(doc)
    assert legacy.queue_shard is None
    at_poll = planner.after(plan, legacy, Completed({"reservation": "r"}))
    assert at_poll.next is not None and at_poll.next.queue == "q-polls"


def test_a_lane_gets_its_own_shard_from_its_own_key() -> None:
    queues = replace(QUEUES, shards=8)
    flow_plan = Plan(definition=BATCH, queues=queues, now=NOW, kinds=REGISTRY)
    item_plan = Plan(definition=EACH.item_flow, queues=queues, now=NOW, kinds=REGISTRY)
    record = planner.new_record(flow_plan, flow_id="b-1", input={}, message_id=None, deadline_s=60)
    record = planner.begin_effect(flow_plan, record.focused("prepare"))
    record = planner.after(flow_plan, record, Completed({"ok": True})).focused("each")
    parent = fanned_out(flow_plan, record, ITEMS).focused("each")
    shards = set()
    for lane in range(3):
        made = new_lane(item_plan, parent, scope="each", lane=lane, items=ITEMS)
        expected = shard_of(lane_id(parent.key, "each", lane), 8)
        assert made.queue_shard == expected
        assert made.next is not None and made.next.queue == shard_name("q-steps", expected)
        shards.add(expected)
    assert parent.queue_shard == shard_of("b-1", 8)
    assert len(shards) > 1  # these lanes spread (their keys hash apart)


def test_topology_every_kind_has_the_same_count_and_distinct_names() -> None:
    queues = load_topology().queues
    assert queues.shards == 1
    spec = queues.model_dump(exclude_none=True)
    spec["polls"]["shards"] = 2
    with pytest.raises(ValidationError, match="same shards"):
        Queues.model_validate(spec)
    spec["polls"] |= {"shards": 1, "name": "flow-steps-1"}
    spec["steps"]["shards"] = spec["steps_high"]["shards"] = spec["polls_high"]["shards"] = 1
    Queues.model_validate(spec)  # one shard: flow-steps-1 is a name like any
    with pytest.raises(ValidationError, match="distinct"):
        queues.model_validate(spec).with_shards(2)
    with pytest.raises(ValidationError):
        with_queue_shards(load_topology(), 0)


def test_the_packaged_topology_has_shards_one_on_every_kind() -> None:
    raw = json.loads((Path(__file__).parents[2] / "relayflow" / "topology.json").read_text())
    assert {role: q["shards"] for role, q in raw["queues"].items()} == {
        "steps": 1,
        "polls": 1,
        "steps_high": 1,
        "polls_high": 1,
    }


@pytest.mark.parametrize("value", ["0", "251", "x", "2.5", '{"steps": 2}', "-1"])
def test_a_bad_queue_shards_setting_is_refused_saying_what_it_takes(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("RELAYFLOW_QUEUE_SHARDS", value)
    with pytest.raises(ValidationError, match="RELAYFLOW_QUEUE_SHARDS is one whole number"):
        load_settings()


def test_the_runtime_routes_and_targets_every_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYFLOW_QUEUE_SHARDS", "3")
    settings = load_settings()
    assert settings.queue_shards == 3
    topology = with_queue_shards(load_topology(), settings.queue_shards)
    targets = task_targets(settings, topology)
    assert set(targets) == {q.name for q in topology.queues.provisioned()}
    assert len(targets) == 12
    assert targets["flow-polls-2"].url.endswith("/tasks/poll")
    assert targets["flow-steps-high-1"].url.endswith("/tasks/step")
    assert targets["flow-steps-2"].dispatch_deadline_s == topology.queues.steps.dispatch_deadline_s
    names = queue_names(topology)
    assert names.shards == 3
    assert names.for_kind(TaskKind.POLL, "high", 2) == "flow-polls-high-2"
    assert names.for_kind(TaskKind.POLL, "high", 2) in targets


def test_the_local_stack_hands_its_shards_to_every_process() -> None:
    ports = Ports(22000)
    assert relayflow_env(ports, queue_shards=4)["RELAYFLOW_QUEUE_SHARDS"] == "4"
    assert "RELAYFLOW_QUEUE_SHARDS" not in relayflow_env(ports)
    assert child_env({}, ports, queue_shards=2)["RELAYFLOW_QUEUE_SHARDS"] == "2"
    stack = Stack(ports=ports, queue_shards=4, queue_rate=20, state_dir=Path("/nonexistent"))
    assert stack.env()["RELAYFLOW_QUEUE_SHARDS"] == "4"
    provisioned = stack.topology().queues.provisioned()
    assert len(provisioned) == 16
    assert {q.max_dispatches_per_second for q in provisioned} == {20}


@pytest.mark.parametrize(("shards", "rate"), [(0, None), (251, None), (2, 0.0), (2, 600.0)])
def test_the_local_stack_refuses_a_bad_count_or_rate(shards: int, rate: float | None) -> None:
    with pytest.raises(ValueError, match=r"queue shards must be|queue_rate must be"):
        Stack(ports=Ports(22000), queue_shards=shards, queue_rate=rate)


def test_local_up_takes_the_flag_else_the_environment_and_refuses_bad_counts() -> None:
    assert queue_shards_of(4, {}) == 4
    assert queue_shards_of(None, {"RELAYFLOW_QUEUE_SHARDS": "3"}) == 3
    assert queue_shards_of(None, {}) is None
    with pytest.raises(ValueError, match=r"--queue-shards must be a whole number in 1\.\.250"):
        queue_shards_of(0, {})
    with pytest.raises(ValueError, match="RELAYFLOW_QUEUE_SHARDS must be"):
        queue_shards_of(None, {"RELAYFLOW_QUEUE_SHARDS": "lots"})


def test_the_bench_counts_each_kinds_shards_and_their_balance() -> None:
    kinds = ["flow-steps", "flow-polls", "flow-steps-high"]
    assert kind_of("flow-steps-3", set(kinds)) == "flow-steps"
    assert kind_of("flow-steps-high", set(kinds)) == "flow-steps-high"
    assert kind_of("flow-steps-high-2", set(kinds)) == "flow-steps-high"
    assert kind_of("other", set(kinds)) is None
    counts = per_shard({"flow-steps": 10, "flow-steps-1": 14, "flow-polls-1": 5}, kinds, 2)
    assert counts == {"flow-steps": [10, 14], "flow-polls": [0, 5]}
    result = Result(2, 10, 10, 5.0, 29, counts, 0.5)
    assert result.balance("flow-steps") == pytest.approx(14 / 12)
    assert result.flows_per_s == 2.0
