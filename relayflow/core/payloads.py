"""Payload offload: values too large for a flow document live in a bucket, and the document
holds a claim check — ``{"$relayflow": {"ref": {bucket, name, sha256, size}}}`` — in their place.

``Offload`` is a codec (``core.codec``): a value whose JSON is over the threshold is written
as one object and replaced by its reference; reading resolves every reference, checking the
object's size and SHA-256, so a consumer sees the value as if it had been inline, or the flow
ends with a clear code (PAYLOAD_MISSING, PAYLOAD_CORRUPT), never with a wrong value.

**Names.** ``{hash prefix}/{flow key}/{incarnation}/{sha256}``: the prefix (of the key) spreads
writes over the bucket's key range (Cloud Storage auto-scales by name range and advises against
sequential names: https://cloud.google.com/storage/docs/request-rate); the key and incarnation
make every object one flow's (a lane's are its flow's), so identical values dedupe within a
flow and a flow id reused after its document expired never shares an object with the old
flow; the content hash makes a write idempotent (a retry, a redelivery, a conflict re-run).

**Retention.** An object is written while its flow runs (or undoes) and never rewritten, so it
is at most as old as the flow. The bucket's lifecycle rule deletes objects older than
``lifecycle_age_days(retention_days)``: the flow TTL (``RELAYFLOW_RETENTION_DAYS``) plus the
longest a flow runs with a deadline (``MAX_RUN_DAYS``, a start message's longest
``deadline_s``). A flow that runs longer than that without a deadline may find its oldest
payloads gone: it ends PAYLOAD_MISSING, never with a wrong value.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from relayflow.core.codec import MARKER, Slot, envelope, walk
from relayflow.core.errors import PayloadCorrupt, PayloadMissing
from relayflow.core.ports import Blobs
from relayflow.core.records import FlowRecord
from relayflow.core.sharding import prefix_of

REF = "ref"
KIB = 1024
MIB = 1024 * KIB
# Values up to this many bytes of JSON stay in the document. A flow document is at most 1 MiB
# (https://cloud.google.com/firestore/quotas#collections_documents_and_fields) and relayflow
# keeps it under 900 KiB; an inline output may be there up to three times (the step's output,
# its effect's copy for the undo, the result's copy), so at 16 KiB a flow of 15 steps, its
# input and 200 history entries still take under half of it, and a result event (which
# carries the result's data inline up to this) stays far below Pub/Sub's 10 MB.
DEFAULT_THRESHOLD_BYTES = 16 * KIB
MIN_THRESHOLD_BYTES = 1 * KIB
MAX_THRESHOLD_BYTES = 128 * KIB
# The largest one value may be once it is offloaded: a handler's output, a ForEach's joined
# output, a child's input. What a worker holds in memory while it reads or writes one.
MAX_PAYLOAD_BYTES = 100 * MIB
# A start input arrives inside its Pub/Sub message, at most 10 MB
# (https://cloud.google.com/pubsub/quotas#resource_limits), base64 in a push body: 8 MiB of
# JSON leaves room for the rest of the message.
MAX_OFFLOADED_INPUT_BYTES = 8 * MIB
# A start message's longest deadline (core.messages.MAX_DEADLINE_S), in days.
MAX_RUN_DAYS = 30
# A ForEach lane moves its items' outputs into a page object once they take this much, so its
# document stays small however many items it runs (``page``).
PAGE_BYTES = 64 * KIB


@dataclass(frozen=True)
class Sizes:
    """How large a flow's values may be: a start input, a step output, a child's input."""

    input_bytes: int
    output_bytes: int
    child_input_bytes: int


# Without a bucket every value lives in the document.
INLINE = Sizes(input_bytes=64 * KIB, output_bytes=256 * KIB, child_input_bytes=256 * KIB)
OFFLOADED = Sizes(
    input_bytes=MAX_OFFLOADED_INPUT_BYTES,
    output_bytes=MAX_PAYLOAD_BYTES,
    child_input_bytes=MAX_PAYLOAD_BYTES,
)


class Ref(BaseModel):
    """A claim check: where an offloaded value is and what it must hash to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str = Field(min_length=3, max_length=222)
    name: str = Field(min_length=1, max_length=1024)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0, le=MAX_PAYLOAD_BYTES)


def lifecycle_age_days(retention_days: float) -> int:
    """The age (days) past which the bucket's lifecycle rule may delete an object."""
    return math.ceil(retention_days) + MAX_RUN_DAYS


def object_name(slot: Slot, sha256: str) -> str:
    """The object a value of ``slot``'s flow with this hash is written to."""
    return f"{prefix_of(slot.key)}/{slot.key}/{slot.incarnation}/{sha256}"


def serialized(value: Any) -> bytes:
    """A value's JSON, as it is measured and written."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def ref_of(stored: Any) -> Ref | None:
    """The reference ``stored`` is, or None if it is a value in place."""
    if not isinstance(stored, dict) or len(stored) != 1:
        return None
    inner = next(iter(stored.values()))
    if not isinstance(inner, dict) or set(inner) != {REF} or next(iter(stored)) != MARKER:
        return None
    return _parsed(inner[REF])


def _parsed(body: Any) -> Ref:
    try:
        return Ref.model_validate(body)
    except ValidationError:
        raise PayloadCorrupt("a stored value holds a malformed payload reference") from None


def fingerprint(stored: Any) -> Any:
    """``stored`` with each reference replaced by its hash: equal for equal values, whichever
    flow's objects hold them."""
    return walk(stored, REF, lambda body: f"sha256:{_parsed(body).sha256}")


def refs(stored: Any) -> list[Ref]:
    """The payload references in ``stored`` (those nested in payloads not read)."""
    found: list[Ref] = []

    def note(body: Any) -> None:
        found.append(_parsed(body))

    walk(stored, REF, note)
    return found


class Offload:
    """The offload codec (see the module's docstring) over the bucket ``blobs``."""

    sizes = OFFLOADED

    def __init__(
        self,
        blobs: Blobs,
        *,
        threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
    ) -> None:
        if not MIN_THRESHOLD_BYTES <= threshold_bytes <= MAX_THRESHOLD_BYTES:
            raise ValueError(
                f"the offload threshold is {MIN_THRESHOLD_BYTES}..{MAX_THRESHOLD_BYTES} bytes, "
                f"not {threshold_bytes}"
            )
        self.blobs = blobs
        self.threshold_bytes = threshold_bytes
        self._written = _Written()

    def encode(self, value: Any, slot: Slot) -> Any:
        """``value``, or its reference if its JSON is over the threshold."""
        data = serialized(value)
        if len(data) <= self.threshold_bytes:
            return value
        return self.put(data, slot)

    def put(self, data: bytes, slot: Slot) -> dict[str, Any]:
        """Write ``data`` as ``slot``'s flow's object; its reference."""
        sha = hashlib.sha256(data).hexdigest()
        ref = Ref(bucket=self.blobs.bucket, name=object_name(slot, sha), sha256=sha, size=len(data))
        if ref.name not in self._written:
            self.blobs.put(ref.name, data)
            self._written.add(ref.name)
        return envelope(REF, ref.model_dump())

    def decode(self, stored: Any, slot: Slot) -> Any:
        """``stored`` with every reference replaced by the value it names."""
        return walk(stored, REF, self._value)

    def _value(self, body: Any) -> Any:
        return json.loads(self.fetch(_parsed(body)))

    def fetch(self, ref: Ref) -> bytes:
        """The bytes ``ref`` names, checked: PayloadMissing, PayloadCorrupt."""
        data = self.blobs.get(ref.bucket, ref.name)
        where = f"gs://{ref.bucket}/{ref.name}"
        if data is None:
            raise PayloadMissing(f"the payload {where} ({ref.size} bytes) is gone")
        if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise PayloadCorrupt(
                f"the payload {where} does not match its reference: {len(data)} bytes, "
                f"expected {ref.size} with SHA-256 {ref.sha256[:16]}…"
            )
        return data


class _Written:
    """The names this process wrote lately, so a value stored again is not written again.
    Nothing read is kept: every read is checked against the bucket as it is now, so an object
    gone or changed there is seen as such (PAYLOAD_MISSING, PAYLOAD_CORRUPT)."""

    def __init__(self, max_names: int = 10_000) -> None:
        self._names: OrderedDict[str, None] = OrderedDict()
        self._max_names = max_names
        self._lock = threading.Lock()

    def __contains__(self, name: str) -> bool:
        with self._lock:
            return name in self._names

    def add(self, name: str) -> None:
        with self._lock:
            self._names[name] = None
            if len(self._names) > self._max_names:
                self._names.popitem(last=False)


def page_due(lane: FlowRecord) -> bool:
    """Whether a lane's items' outputs in its document take more than a page."""
    return bool(lane.item_outputs) and len(serialized(lane.item_outputs)) > PAGE_BYTES


def paged(lane: FlowRecord, page: dict[str, Any], moved: dict[str, Any]) -> FlowRecord | None:
    """``lane`` with the outputs ``moved`` (as they were when ``page`` was written of them)
    replaced by ``page``; None if they are no longer all there (the page was made already)."""
    if any(lane.item_outputs.get(k, _GONE) != v for k, v in moved.items()):
        return None
    kept = {k: v for k, v in lane.item_outputs.items() if k not in moved}
    update = {
        "item_outputs": kept,
        "item_pages": [*lane.item_pages, page],
        "paged_items": lane.paged_items + len(moved),
    }
    return lane.model_copy(update=update).stored()


_GONE = object()
