"""Recording every operation relayflow makes on Firestore, Cloud Tasks and Pub/Sub.

When ``RELAYFLOW_OPS_LOG=<path>`` is set, each relayflow process appends one JSON line per
operation to that file: Firestore writes (collection, document id, the top-level fields written
and which of them hold timestamps, whether it is a create), reads (point reads and queries:
collection, documents returned), Cloud Tasks creates (queue, task name, created or already
there) and Pub/Sub publishes (topic, bytes), each with its monotonic and wall time and the
component. ``bench/capacity.py`` feeds the log to ``relayflow.capacity``, which turns it into
the load each flow puts on every limited resource.

The choke points are the clients themselves, wrapped once by the composition root
(``relayflow.runtime``): Firestore's generated API object (``_firestore_api``, which both
``relayflow.gcp.documents`` and the high-level client's queries, batches and transactions call),
the Cloud Tasks client and the Pub/Sub publisher. Without the variable nothing is wrapped, so
the recorder costs nothing in production.

Lines are written with one ``os.write`` on a descriptor opened ``O_APPEND``: processes (and a
process's threads) share one file, and each line lands whole (Linux appends a write below the
page size atomically to a local file).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, cast

import proto
from google.api_core.exceptions import AlreadyExists

OPS_LOG_ENV = "RELAYFLOW_OPS_LOG"
# Nested timestamps deeper than this are left out: nothing relayflow indexes is deeper.
_MAX_DEPTH = 4

T = TypeVar("T")


class Recorder:
    """Appends operation records, one JSON line each, to a shared file."""

    def __init__(self, path: str, component: str) -> None:
        self._path = path
        self._component = component
        self._fd: int | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def record(self, op: str, **fields: Any) -> None:
        line = {"op": op, "c": self._component, "t": time.time(), "m": time.monotonic(), **fields}
        data = (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        os.write(self._descriptor(), data)

    def _descriptor(self) -> int:
        # Opened lazily and again after a fork (gunicorn forks its worker after the import).
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._pid = os.getpid()
            return self._fd


def from_env(component: str, environ: Mapping[str, str] | None = None) -> Recorder | None:
    """The recorder ``RELAYFLOW_OPS_LOG`` asks for, or None when it is unset or empty."""
    path = (os.environ if environ is None else environ).get(OPS_LOG_ENV, "")
    return Recorder(path, component) if path else None


def firestore(client: T, recorder: Recorder | None) -> T:
    """``client`` (a ``firestore.Client``) with its API object recording every call."""
    if recorder is not None:
        api = client._firestore_api  # type: ignore[attr-defined]  # the client's own; see documents.py
        client._firestore_api_internal = _FirestoreApi(api, recorder)  # type: ignore[attr-defined]
    return client


def tasks(client: T, recorder: Recorder | None) -> T:
    """``client`` (a ``CloudTasksClient``), recording every task it creates."""
    return client if recorder is None else cast(T, _TasksClient(client, recorder))


def publisher(client: T, recorder: Recorder | None) -> T:
    """``client`` (a ``PublisherClient``), recording every message it publishes."""
    return client if recorder is None else cast(T, _Publisher(client, recorder))


def _raw(message: Any) -> Any:
    """The protobuf under a proto-plus wrapper (or the protobuf itself)."""
    return type(message).pb(message) if isinstance(message, proto.Message) else message


def _field(request: Any, name: str) -> Any:
    """A request field, whether the client passed a dict or a message."""
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(_raw(request), name)


def split_path(path: str) -> tuple[str, str]:
    """(collection, document id) of a document's resource name."""
    parts = path.split("/documents/", 1)[-1].split("/")
    return (parts[-2], parts[-1]) if len(parts) >= 2 else ("", parts[-1])


def _top(field_path: str) -> str:
    """The top-level field of an update-mask path (``a.b`` -> ``a``; backquotes removed)."""
    if field_path.startswith("`"):
        return field_path[1:].split("`", 1)[0]
    return field_path.split(".", 1)[0].removesuffix("[]")


def timestamp_paths(fields: Any, prefix: str = "", depth: int = 0) -> Iterator[str]:
    """Dotted paths of the timestamps in a map of Value messages (``[]`` marks a list)."""
    for key, value in fields.items():
        path = f"{prefix}{key}"
        kind = value.WhichOneof("value_type")
        if kind == "timestamp_value":
            yield path
        elif kind == "map_value" and depth < _MAX_DEPTH:
            yield from timestamp_paths(value.map_value.fields, path + ".", depth + 1)
        elif kind == "array_value" and depth < _MAX_DEPTH:
            for item in value.array_value.values:
                if item.WhichOneof("value_type") == "timestamp_value":
                    yield path + "[]"
                elif item.WhichOneof("value_type") == "map_value":
                    yield from timestamp_paths(item.map_value.fields, path + "[].", depth + 1)


def describe_write(write: Any) -> dict[str, Any]:
    """What one Write of a commit does to its document."""
    pb = _raw(write)
    kind = pb.WhichOneof("operation")
    if kind == "delete":
        collection, doc = split_path(pb.delete)
        return {"coll": collection, "id": doc, "kind": "delete", "fields": [], "ts": []}
    document = pb.update if kind == "update" else None
    name = document.name if document is not None else pb.transform.document
    collection, doc = split_path(name)
    masked = pb.HasField("update_mask")
    written = (
        {_top(p) for p in pb.update_mask.field_paths}
        if masked
        else set(document.fields.keys() if document is not None else ())
    )
    written |= {_top(t.field_path) for t in pb.update_transforms}
    stamps: list[str] = []
    if document is not None:
        stamps = sorted({p for p in timestamp_paths(document.fields) if _top(p) in written})
    create = (
        pb.HasField("current_document")
        and pb.current_document.HasField("exists")
        and not pb.current_document.exists
    )
    return {
        "coll": collection,
        "id": doc,
        "kind": "create" if create else ("update" if masked else "set"),
        "fields": sorted(written),
        "ts": stamps,
        "bytes": pb.ByteSize(),
    }


class _FirestoreApi:
    """Firestore's generated API object, recording each Commit, GetDocument, BatchGetDocuments,
    RunQuery and RunAggregationQuery (everything else passes through)."""

    def __init__(self, api: Any, recorder: Recorder) -> None:
        self._api = api
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        response = self._api.commit(*args, **kwargs)
        request = kwargs.get("request", args[0] if args else None)
        for write in _field(request, "writes") or ():
            self._recorder.record("fs.write", **describe_write(write))
        return response

    def get_document(self, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request", args[0] if args else None)
        collection, _ = split_path(str(_field(request, "name")))
        try:
            return self._api.get_document(*args, **kwargs)
        finally:  # a document that is not there is a read all the same
            self._recorder.record("fs.read", rpc="get", coll=collection, n=1)

    def batch_get_documents(self, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request", args[0] if args else None)
        names = list(_field(request, "documents") or ())
        collection = split_path(str(names[0]))[0] if names else ""
        stream = self._api.batch_get_documents(*args, **kwargs)
        return _Counted(stream, self._recorder, "batch_get", collection)

    def run_query(self, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request", args[0] if args else None)
        stream = self._api.run_query(*args, **kwargs)
        return _Counted(stream, self._recorder, "query", _query_collection(request))

    def run_aggregation_query(self, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request", args[0] if args else None)
        aggregation = _field(request, "structured_aggregation_query")
        query = {"structured_query": _field(aggregation, "structured_query")}
        stream = self._api.run_aggregation_query(*args, **kwargs)
        return _Counted(stream, self._recorder, "aggregation", _query_collection(query))


def _query_collection(request: Any) -> str:
    query = _raw(_field(request, "structured_query"))
    # The API's field is `from`; the generated classes name it `from_`.
    sources: Any = getattr(query, "from_", None) or getattr(query, "from", ())
    return str(sources[0].collection_id) if len(sources) else ""


class _Counted:
    """A streaming response that records, once it is done, how many results it returned."""

    def __init__(self, stream: Any, recorder: Recorder, rpc: str, collection: str) -> None:
        self._stream = iter(stream)
        self._source = stream
        self._recorder = recorder
        self._rpc = rpc
        self._collection = collection
        self._count = 0
        self._done = False

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._stream)
        except StopIteration:
            self._finish()
            raise
        self._count += _results(self._rpc, _raw(item))
        return item

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def __del__(self) -> None:  # a stream its caller stopped reading early
        with contextlib.suppress(Exception):  # at interpreter exit the file may be gone
            self._finish()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            # A query that returns nothing is billed one read (Firestore pricing).
            self._recorder.record("fs.read", rpc=self._rpc, coll=self._collection, n=self._count)


def _results(rpc: str, response: Any) -> int:
    """How many documents (or aggregation results) one streamed response carries."""
    if rpc == "query":
        return 1 if response.HasField("document") else 0
    if rpc == "batch_get":
        return 1 if response.HasField("found") or response.HasField("missing") else 0
    return 1 if response.HasField("result") else 0


class _TasksClient:
    """A Cloud Tasks client that records every CreateTask (and whether it was there already)."""

    def __init__(self, client: Any, recorder: Recorder) -> None:
        self._client = client
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create_task(self, *args: Any, **kwargs: Any) -> Any:
        request = _raw(kwargs.get("request", args[0] if args else None))
        queue = str(request.parent).rsplit("/", 1)[-1]
        task = str(request.task.name).rsplit("/", 1)[-1]
        outcome = "created"
        try:
            return self._client.create_task(*args, **kwargs)
        except AlreadyExists:
            outcome = "exists"
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            self._recorder.record("tasks.create", queue=queue, task=task, outcome=outcome)


class _Publisher:
    """A Pub/Sub publisher that records every message it publishes."""

    def __init__(self, client: Any, recorder: Recorder) -> None:
        self._client = client
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def publish(self, topic: str, data: bytes, *args: Any, **attrs: Any) -> Any:
        size = len(data) + sum(len(k) + len(str(v)) for k, v in attrs.items())
        self._recorder.record("pubsub.publish", topic=topic.rsplit("/", 1)[-1], bytes=size)
        return self._client.publish(topic, data, *args, **attrs)
