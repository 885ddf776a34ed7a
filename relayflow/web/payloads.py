"""Offloaded values read back for a reader: what ``GET /flows/{id}?resolve=true`` answers and
the console's flow page shows when asked (its sensitive fields still sealed: redaction comes
after, for the caller)."""

from __future__ import annotations

from typing import Any

from relayflow.core.engine import Engine
from relayflow.core.payloads import MIB, refs
from relayflow.core.records import FlowRecord
from relayflow.web import params

# What one answer or page reads back from the bucket at most.
MAX_RESOLVED_BYTES = 16 * MIB


def offloaded(record: FlowRecord) -> bool:
    """Whether any of the flow's input, outputs and result lies in the bucket."""
    data = record.result.data if record.result is not None else None
    return bool(refs({"input": record.input, "outputs": record.outputs, "result": data}))


def read_back(engine: Engine, record: FlowRecord) -> FlowRecord:
    """``record`` with its input, outputs and result as its handlers and clients see them:
    payloads offloaded to the bucket read back (at most ``MAX_RESOLVED_BYTES`` of them at
    once: larger ones are for the client's ``result()`` or the bucket). A document shows each
    as its reference, ``{"$relayflow": {"ref": {bucket, name, sha256, size}}}``."""
    values: dict[str, Any] = {"input": record.input, "outputs": record.outputs}
    if record.result is not None:
        values["result_data"] = record.result.data
    size = sum(ref.size for ref in refs(values))
    if size > MAX_RESOLVED_BYTES:
        raise params.PayloadTooLarge(
            f"the flow's offloaded values take {size} bytes; the api shows at most "
            f"{MAX_RESOLVED_BYTES} (read them with the client, or from the bucket)"
        )
    shown = engine.loaded(values, record)
    result = record.result
    if result is not None:
        result = result.model_copy(update={"data": shown["result_data"]})
    return record.model_copy(
        update={"input": shown["input"], "outputs": shown["outputs"], "result": result}
    )
