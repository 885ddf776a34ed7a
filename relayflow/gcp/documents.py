"""Reading and writing one Firestore document with plain protobuf messages.

Every task reads its flow's document once and writes it once or twice, so the cost of turning a
document into a request is most of a handler's own CPU. The high-level client spends it
generously: ``DocumentReference.update`` walks every value through proto-plus wrappers and
parses every key as a field path, and ``get`` opens a streaming ``BatchGetDocuments`` call.
Profiled on the local stack (``bench/e2e_flows.py --profile``) that was about 60 % of the
worker's Python time and 50 % of the poller's. Here a document goes straight to and from the
protobuf classes underneath (upb, in C), a read is a unary ``GetDocument``, and an update sends
only the top-level fields that changed, under an update mask — so a poll that appends one
history entry rewrites the fields it touched, not the whole document.

The calls go through the client's own generated API object, so the client's transport, retries,
credentials and emulator handling (``FIRESTORE_EMULATOR_HOST``) are the ones in use; what this
module uses of the client that is not public (``_firestore_api``, ``_database_string``,
``_rpc_metadata``) is named once, below, and covered by the integration tests against the
emulator.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any, NamedTuple

from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.api_core.exceptions import NotFound
from google.cloud import firestore
from google.cloud.firestore_v1.types import document
from google.cloud.firestore_v1.types import firestore as api
from google.protobuf.timestamp_pb2 import Timestamp

_Value = document.Value.pb()
_Document = document.Document.pb()
_GetRequest = api.GetDocumentRequest.pb()
_CommitRequest = api.CommitRequest.pb()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SIMPLE_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def encode(value: Any, into: Any) -> None:
    """Write ``value`` (None, bool, int, float, str, bytes, datetime, dict, list) into the
    Value message ``into``, as the client's own encoder would."""
    if isinstance(value, dict):
        fields = into.map_value.fields
        into.map_value.SetInParent()  # an empty map is a map, not a missing value
        for key, item in value.items():
            encode(item, fields[key])
    elif isinstance(value, list | tuple):
        values = into.array_value.values
        into.array_value.SetInParent()
        for item in value:
            encode(item, values.add())
    else:
        _encode_scalar(value, into)


def _encode_scalar(value: Any, into: Any) -> None:
    if value is None:
        into.null_value = 0
    elif isinstance(value, bool):  # before int: a bool is an int
        into.boolean_value = value
    elif isinstance(value, int):
        into.integer_value = value
    elif isinstance(value, float):
        into.double_value = value
    elif isinstance(value, str):
        into.string_value = value.value if isinstance(value, Enum) else value
    elif isinstance(value, DatetimeWithNanoseconds):
        into.timestamp_value.CopyFrom(_timestamp(value))
    elif isinstance(value, datetime):
        # Timestamp.FromDatetime, without its generality: a tenth of a start's CPU.
        since = (value if value.tzinfo else value.replace(tzinfo=UTC)) - _EPOCH
        stamp = into.timestamp_value
        stamp.seconds = since.days * 86400 + since.seconds
        stamp.nanos = since.microseconds * 1000
    elif isinstance(value, bytes):
        into.bytes_value = value
    else:
        raise TypeError(f"cannot store a {type(value).__name__} in Firestore")


def decode(value: Any) -> Any:
    """A Value message as a Python value (timestamps as aware UTC datetimes)."""
    kind = value.WhichOneof("value_type")
    if kind == "map_value":
        return {key: decode(item) for key, item in value.map_value.fields.items()}
    if kind == "array_value":
        return [decode(item) for item in value.array_value.values]
    if kind == "timestamp_value":
        return value.timestamp_value.ToDatetime(tzinfo=UTC)
    if kind == "null_value" or kind is None:
        return None
    if kind in ("geo_point_value", "reference_value", "field_reference_value"):
        raise ValueError(f"relayflow stores no {kind}")
    return getattr(value, kind)


def decode_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {key: decode(item) for key, item in fields.items()}


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down: ``1 == True == 1.0`` in Python, but a
    field that changed from one to another has changed in Firestore. An enum is stored as
    its value, so it is the same as its value."""
    a = a.value if isinstance(a, Enum) else a
    b = b.value if isinstance(b, Enum) else b
    if type(a) is not type(b):
        return isinstance(a, datetime) and isinstance(b, datetime) and a == b
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level fields of ``new`` that differ from ``old`` (all of them without ``old``)."""
    if old is None:
        return dict(new)
    missing = object()
    return {key: value for key, value in new.items() if not same(old.get(key, missing), value)}


def appended(old: Mapping[str, Any] | None, fields: dict[str, Any], name: str) -> list[Any]:
    """If ``fields[name]`` is the stored list with entries appended, none equal to another or
    to a stored one, take it out of ``fields`` and return the new entries: they can be sent
    as an append (which skips an entry already present) instead of the whole list."""
    new, stored = fields.get(name), (old or {}).get(name)
    if not isinstance(new, list) or not isinstance(stored, list) or len(new) <= len(stored):
        return []
    head, tail = new[: len(stored)], new[len(stored) :]
    if not all(same(a, b) for a, b in zip(head, stored, strict=True)):
        return []
    for i, entry in enumerate(tail):
        if any(same(entry, other) for other in stored) or any(
            same(entry, other) for other in tail[:i]
        ):
            return []
    del fields[name]
    return tail


# Lists that only grow between trims, so a write appends to them (``appended``).
APPENDED = ("history",)


def write_of(
    old: Mapping[str, Any] | None, new: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """What a write from stored ``old`` to ``new`` sends: the changed fields to replace, and
    the entries to append to lists that only grew."""
    fields = changed(old, new)
    appends = {name: tail for name in APPENDED if (tail := appended(old, fields, name))}
    return fields, appends


def field_path(name: str) -> str:
    """A top-level field name as an update-mask path (backquoted unless a plain identifier)."""
    if _SIMPLE_FIELD.fullmatch(name):
        return name
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _version(stamp: Timestamp) -> datetime:
    """An update time to the nanosecond, as a precondition must name it."""
    return DatetimeWithNanoseconds.from_timestamp_pb(stamp)  # type: ignore[no-untyped-call,no-any-return]


def _timestamp(when: datetime) -> Timestamp:
    if isinstance(when, DatetimeWithNanoseconds):
        return when.timestamp_pb()  # type: ignore[no-untyped-call]  # exact: a version may carry nanoseconds
    stamp = Timestamp()
    stamp.FromDatetime(when if when.tzinfo else when.replace(tzinfo=UTC))
    return stamp


class Written(NamedTuple):
    """A write's outcome: the document's new update time, and the bytes of fields it sent."""

    version: datetime
    size: int


class Documents:
    """Get, create and conditionally update single documents of one client's database."""

    def __init__(self, client: firestore.Client) -> None:
        self._api = client._firestore_api
        self._database = client._database_string
        self._metadata = client._rpc_metadata

    def path(self, collection: str, doc_id: str) -> str:
        return f"{self._database}/documents/{collection}/{doc_id}"

    def get(self, path: str, *, timeout: float) -> tuple[dict[str, Any], datetime] | None:
        """The document's fields and update time, or None if there is none."""
        request = _GetRequest(name=path)
        try:
            found = self._api.get_document(
                request=api.GetDocumentRequest.wrap(request),
                metadata=self._metadata,
                timeout=timeout,
            )
        except NotFound:
            return None
        pb = document.Document.pb(found)
        return decode_fields(pb.fields), _version(pb.update_time)

    def create(self, path: str, fields: Mapping[str, Any], *, timeout: float) -> Written:
        """Create the document (AlreadyExists if it exists)."""
        request = _CommitRequest(database=self._database)
        change = request.writes.add()  # built in place: appending would copy it
        change.current_document.exists = False
        return self._commit(request, path, fields, mask=None, timeout=timeout)

    def update(
        self,
        path: str,
        fields: Mapping[str, Any],
        *,
        unchanged_since: datetime,
        timeout: float,
        append: Mapping[str, list[Any]] | None = None,
    ) -> Written:
        """Replace the top-level ``fields`` of the document, and append ``append``'s entries
        to its lists, if it has not changed since ``unchanged_since`` (FailedPrecondition if
        it has)."""
        request = _CommitRequest(database=self._database)
        change = request.writes.add()
        change.current_document.update_time.CopyFrom(_timestamp(unchanged_since))
        for name, entries in (append or {}).items():
            transform = change.update_transforms.add()
            transform.field_path = field_path(name)
            transform.append_missing_elements.SetInParent()
            for entry in entries:
                encode(entry, transform.append_missing_elements.values.add())
        return self._commit(request, path, fields, mask=fields.keys(), timeout=timeout)

    def _commit(
        self,
        request: Any,
        path: str,
        fields: Mapping[str, Any],
        *,
        mask: Iterable[str] | None,
        timeout: float,
    ) -> Written:
        change = request.writes[0]
        change.update.name = path
        for key, value in fields.items():
            encode(value, change.update.fields[key])
        if mask is not None:
            change.update_mask.field_paths.extend(field_path(name) for name in mask)
        response = self._api.commit(
            request=api.CommitRequest.wrap(request), metadata=self._metadata, timeout=timeout
        )
        result = api.CommitResponse.pb(response).write_results[0]
        stamp = result.update_time if result.HasField("update_time") else None
        if stamp is None:  # Firestore leaves it out when nothing changed; the commit time is it
            stamp = api.CommitResponse.pb(response).commit_time
        version = _version(stamp)
        appended = sum(t.ByteSize() for t in change.update_transforms)
        return Written(version, change.update.ByteSize() + appended)
