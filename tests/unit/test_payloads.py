"""relayflow.core.payloads and core.codec: values over the threshold go to the bucket and the
flow document holds a claim check; handlers, compensations, output models and the harness see
the values as if they were inline; a payload gone or tampered with ends the flow with its code;
a caller's value holding the envelope's key is never taken for one. Through the harness (the
bucket in memory), then the codec on its own."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from pydantic import BaseModel

from relayflow import ActionStep, Flow, StepContext
from relayflow.core.codec import MARKER, Chain, Slot
from relayflow.core.engine import Limits
from relayflow.core.errors import PayloadCorrupt, PayloadMissing
from relayflow.core.flows import ForEach
from relayflow.core.payloads import (
    PAGE_BYTES,
    Offload,
    fingerprint,
    lifecycle_age_days,
    object_name,
    ref_of,
    serialized,
)
from relayflow.core.state import Status
from relayflow.testing import Harness
from relayflow.testing.memory import MemoryBlobs

THRESHOLD = 4096
BIG = {"blob": "x" * 300_000, "n": 1}
STEPWISE = Limits(continue_inline=False)  # each step its own task: a test acts between them
SLOT = Slot(key="order-1", incarnation="18f", flow="orders", version=1, path=("input",))


def doc_bytes(h: Harness, flow_id: str) -> int:
    return len(h.flow(flow_id).model_dump_json().encode())


def big_flow(seen: list[Any]) -> Flow:
    def make(ctx: StepContext) -> dict[str, Any]:
        return {**BIG, "input": ctx.input["n"]}

    def use(ctx: StepContext) -> dict[str, Any]:
        seen.append(ctx.outputs["make"])
        return {"length": len(ctx.outputs["make"]["blob"]), "input": dict(ctx.input)}

    def undo(ctx: StepContext) -> dict[str, Any]:
        seen.append(("undo", ctx.outputs["make"]))
        return {}

    return Flow(
        name="big",
        steps=(ActionStep("make", make, compensate=undo), ActionStep("use", use)),
    )


def test_a_large_output_is_offloaded_and_the_next_step_reads_it_unchanged() -> None:
    seen: list[Any] = []
    h = Harness(big_flow(seen), offload_threshold_bytes=THRESHOLD)
    flow_id = h.start("big", {"n": 7})

    record = h.run(flow_id)

    assert record is not None and record.status is Status.SUCCEEDED
    assert seen == [{**BIG, "input": 7}]
    ref = ref_of(record.outputs["make"])
    assert ref is not None and ref.size == len(serialized({**BIG, "input": 7}))
    assert ref.name == object_name(Slot.of(record, "outputs", "make"), ref.sha256)
    assert h.output(flow_id, "make") == {**BIG, "input": 7}
    assert doc_bytes(h, flow_id) < 16 * 1024
    assert h.result_data(flow_id) == {"length": 300_000, "input": {"n": 7}}


def test_without_offload_the_same_output_is_refused_as_too_large() -> None:
    h = Harness(big_flow([]))
    flow_id = h.start("big", {"n": 7})

    record = h.run(flow_id)

    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.error is not None
    assert record.result.error["code"] == "INVALID_OUTPUT"


def test_a_large_input_is_offloaded_and_handlers_read_it_unchanged() -> None:
    seen: list[Any] = []
    h = Harness(big_flow(seen), offload_threshold_bytes=THRESHOLD)
    flow_id = h.start("big", {"n": 1, "pad": "p" * 100_000})

    record = h.run(flow_id)

    assert record is not None and record.status is Status.SUCCEEDED
    assert ref_of(record.input) is not None
    assert h.result_data(flow_id)["input"] == {"n": 1, "pad": "p" * 100_000}


def test_a_deleted_payload_ends_the_flow_payload_missing_and_its_undo_is_told() -> None:
    seen: list[Any] = []
    h = Harness(big_flow(seen), offload_threshold_bytes=THRESHOLD, limits=STEPWISE)
    flow_id = h.start("big", {"n": 7})
    h.deliver_next(flow_id)  # make: its output offloaded
    ref = ref_of(h.flow(flow_id).outputs["make"])
    assert ref is not None
    del h.blobs.objects[ref.name]

    record = h.run(flow_id)

    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.error is not None
    assert record.result.error["code"] == "PAYLOAD_MISSING"
    assert seen == []  # no handler saw a value in its place


def test_a_tampered_payload_ends_the_flow_payload_corrupt() -> None:
    h = Harness(big_flow([]), offload_threshold_bytes=THRESHOLD, limits=STEPWISE)
    flow_id = h.start("big", {"n": 7})
    h.deliver_next(flow_id)
    ref = ref_of(h.flow(flow_id).outputs["make"])
    assert ref is not None
    h.blobs.objects[ref.name] = serialized({**BIG, "input": 8})  # same size, other content

    record = h.run(flow_id)

    assert record is not None and record.result is not None and record.result.error is not None
    assert record.result.error["code"] == "PAYLOAD_CORRUPT"


def test_an_unreachable_bucket_is_retried_not_failed() -> None:
    h = Harness(big_flow([]), offload_threshold_bytes=THRESHOLD)
    flow_id = h.start("big", {"n": 7})
    h.blobs.failures_left = 1

    record = h.run(flow_id)

    assert record is not None and record.status is Status.SUCCEEDED
    assert h.path(flow_id)[:2] == ["make action #0: retryable error", "make action #1: succeeded"]
    assert "bucket is unreachable" in record.history[0].detail


class Out(BaseModel):
    length: int
    input: dict[str, Any]


def test_an_output_model_checks_the_value_not_its_reference() -> None:
    def make(ctx: StepContext) -> dict[str, Any]:
        return {"length": 3, "input": {"pad": "q" * 50_000}}

    h = Harness(
        Flow(name="typed", steps=(ActionStep("make", make),), output_model=Out),
        offload_threshold_bytes=THRESHOLD,
    )
    flow_id = h.start("typed", {})

    record = h.run(flow_id)

    assert record is not None and record.status is Status.SUCCEEDED
    assert ref_of(record.result.data if record.result else None) is not None


def test_a_caller_value_that_looks_like_a_reference_stays_a_value() -> None:
    forged = {MARKER: {"ref": {"bucket": "b", "name": "n", "sha256": "0" * 64, "size": 1}}}
    seen: list[Any] = []

    def echo(ctx: StepContext) -> dict[str, Any]:
        seen.append(dict(ctx.input))
        return {"got": dict(ctx.input)}

    h = Harness(Flow(name="echo", steps=(ActionStep("echo", echo),)))
    flow_id = h.start("echo", {"doc": forged})

    record = h.run(flow_id)

    assert record is not None and record.status is Status.SUCCEEDED
    assert seen == [{"doc": forged}]
    assert h.result_data(flow_id) == {"got": {"doc": forged}}


def test_a_foreach_of_many_items_pages_its_lanes_and_joins_every_output() -> None:
    def item(ctx: StepContext) -> dict[str, Any]:
        return {"i": ctx.item, "pad": "z" * 1000}

    each = ForEach(
        "each", items=lambda ctx: list(range(200)), steps=(ActionStep("work", item),), concurrency=2
    )
    h = Harness(Flow(name="fan", steps=(each,)), offload_threshold_bytes=THRESHOLD)
    flow_id = h.start("fan", {})

    record = h.run(flow_id)

    assert record is not None and record.status is Status.SUCCEEDED
    out = h.output(flow_id, "each")
    assert out["items"] == [{"i": i, "pad": "z" * 1000} for i in range(200)]
    lanes = [h.store.get(lane_id) for lane_id in record.lanes]
    assert all(lane is not None and lane.item_pages for lane in lanes)
    assert all(
        lane is not None and len(serialized(lane.item_outputs)) <= PAGE_BYTES + 2000
        for lane in lanes
    )
    assert doc_bytes(h, flow_id) < 64 * 1024


def test_offload_names_objects_by_flow_incarnation_and_content_and_writes_each_once() -> None:
    blobs = MemoryBlobs()
    codec = Chain([Offload(blobs, threshold_bytes=1024)])
    value = {"pad": "y" * 5000}

    first = codec.encode(value, SLOT)
    again = codec.encode(value, SLOT)
    other = codec.encode(
        value, Slot(key="order-1", incarnation="190", flow="orders", version=1, path=("input",))
    )

    sha = hashlib.sha256(serialized(value)).hexdigest()
    assert first == again and blobs.writes == 2
    assert ref_of(first) is not None and ref_of(first).name.endswith(f"/order-1/18f/{sha}")  # type: ignore[union-attr]
    assert fingerprint(first) == fingerprint(other) == f"sha256:{sha}"
    assert codec.decode(first, SLOT) == value
    assert codec.encode({"small": 1}, SLOT) == {"small": 1}


def test_a_fresh_reader_checks_size_and_hash_and_names_what_is_missing() -> None:
    blobs = MemoryBlobs()
    stored = Chain([Offload(blobs, threshold_bytes=1024)]).encode({"pad": "y" * 5000}, SLOT)
    reader = Chain([Offload(blobs, threshold_bytes=1024)])  # no cache of the writer's
    ref = ref_of(stored)
    assert ref is not None

    blobs.objects[ref.name] = blobs.objects[ref.name][:-1]
    with pytest.raises(PayloadCorrupt, match="does not match its reference"):
        reader.decode(stored, SLOT)
    del blobs.objects[ref.name]
    with pytest.raises(PayloadMissing, match=ref.name):
        reader.decode(stored, SLOT)


def test_the_lifecycle_keeps_objects_past_the_flow_ttl_and_the_longest_deadline() -> None:
    assert lifecycle_age_days(30.0) == 60
    assert lifecycle_age_days(0.5) == 31


def test_the_threshold_is_bounded() -> None:
    with pytest.raises(ValueError, match="threshold"):
        Offload(MemoryBlobs(), threshold_bytes=10)
    assert json.loads(serialized({"é": 1})) == {"é": 1}


def test_the_offload_settings_are_checked_when_a_process_starts() -> None:
    from pydantic import ValidationError

    from relayflow.runtime import offload
    from relayflow.settings import Settings

    assert offload(Settings(offload_bucket="")) is None
    built = offload(Settings(offload_bucket="acme-payloads", offload_threshold_bytes=2048))
    assert built is not None and built.threshold_bytes == 2048
    assert built.blobs.bucket == "acme-payloads"
    with pytest.raises(ValidationError, match="offload_threshold_bytes"):
        Settings(offload_bucket="acme-payloads", offload_threshold_bytes=10)
    with pytest.raises(ValidationError, match="offload_bucket"):
        Settings(offload_bucket="Not A Bucket")
