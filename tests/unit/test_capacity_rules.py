"""The hotspot rules on synthetic configurations: today's layout (hotspots) and a sharded one
(none); monotonic fields from the models; document ids in key order."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from relayflow.capacity import rules
from relayflow.capacity.deployment import CompositeIndex, Indexes
from relayflow.core.sharding import prefix_of

FIELDS = {"flows": {"updated_at", "next_run_at", "cleanup.since"}}


def test_every_stored_datetime_of_the_flow_document_is_monotonic() -> None:
    paths = set(rules.datetime_paths(rules.FLOW_RATE_MODELS["flows_collection"]))

    assert {"created_at", "updated_at", "next_run_at", "finished_at", "queued_at"} <= paths
    assert {"tracks.*.started_at", "history[].at", "cleanup.since"} <= paths
    assert "step_started_at" not in paths  # excluded from the document


def test_a_new_timestamp_field_is_caught() -> None:
    class Inner(BaseModel):
        at: datetime

    class Doc(BaseModel):
        name: str
        seen_at: datetime | None = None
        parts: list[Inner] = []
        hidden: datetime | None = Field(default=None, exclude=True)

    assert set(rules.datetime_paths(Doc)) == {"seen_at", "parts[].at"}


def test_todays_layout_has_hotspots() -> None:
    indexes = Indexes(
        exempt={"flows": frozenset({"expire_at", "history"})},
        composites=(
            CompositeIndex("list", "flows", ("status", "updated_at", "flow_id")),
            CompositeIndex("overdue", "flows", ("status", "next_run_at")),
        ),
    )

    found = {str(f) for f in rules.index_findings(indexes, FIELDS)}

    assert found == {
        "flows.updated_at [single-field]: indexed, not exempted",
        "flows.next_run_at [single-field]: indexed, not exempted",
        "flows.cleanup.since [single-field]: indexed, not exempted",
        "flows.updated_at [list]: composite without shard first",
        "flows.next_run_at [overdue]: composite without shard first",
    }


def test_a_sharded_layout_has_none() -> None:
    indexes = Indexes(
        # an exempted map exempts what is inside it
        exempt={"flows": frozenset({"updated_at", "next_run_at", "cleanup"})},
        composites=(
            CompositeIndex("list", "flows", ("shard", "status", "updated_at", "flow_id")),
            CompositeIndex("overdue", "flows", ("shard", "status", "next_run_at")),
        ),
    )

    assert rules.index_findings(indexes, FIELDS) == []


def test_shard_must_lead_not_merely_appear() -> None:
    indexes = Indexes(
        exempt={"flows": frozenset({"updated_at", "next_run_at", "cleanup"})},
        composites=(CompositeIndex("list", "flows", ("status", "shard", "updated_at")),),
    )

    [finding] = rules.index_findings(indexes, FIELDS)
    assert (finding.field, finding.index) == ("updated_at", "list")


def test_sequential_ids_are_in_key_order_and_hashed_ones_are_not() -> None:
    keys = [f"order-{i:06d}" for i in range(500)]

    assert rules.key_order(keys) == 1.0
    assert rules.key_order(keys[::-1]) == -1.0
    assert abs(rules.key_order([f"{prefix_of(k)}:{k}" for k in keys])) < 0.2
    assert rules.id_findings("flows", keys)[0].index == "key range"
    assert rules.id_findings("flows", keys[::-1])  # decreasing ids hot-spot too
    assert rules.id_findings("flows", [f"{prefix_of(k)}:{k}" for k in keys]) == []
    assert rules.key_order(["b", "a"]) == 0.0  # too few to say
