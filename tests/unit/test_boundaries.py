"""Bad input is a 4xx with a bounded reason, never a 500 (which any viewer could raise at will
and the 5xx alert would page on): reserved Firestore ids, times outside what Firestore stores,
huge or deeply nested cursors, bodies and tokens, numbers past int()'s digit limit, request
bodies over the limit, and Cloud Tasks headers a task name or a retry count cannot be.

The flows run in memory; ``like_firestore`` makes the in-memory store refuse what Firestore
refuses (a reserved document id; a time its client cannot encode), so a value that would
reach Firestore unchecked fails here as it would in the cloud.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from google.api_core.exceptions import InvalidArgument
from google.cloud.firestore_v1 import _helpers

from relayflow.core.engine import Limits
from relayflow.core.listing import MAX_CURSOR_CHARS, Cursor, FlowFilter
from relayflow.core.position import is_document_id
from relayflow.core.rejections import rejected_task_id
from relayflow.runtime import Runtime
from relayflow.settings import Settings
from relayflow.telemetry import Counters
from relayflow.testing import Harness, MemoryStore
from relayflow.topology import load_topology
from relayflow.web.access import Access
from relayflow.web.services import MAX_REQUEST_BYTES, task_app

from .test_api import FLOW, Api, build, message

EDGES = ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00")


def refuse_id(doc_id: str) -> None:
    """InvalidArgument for what Firestore refuses as a document id."""
    if "/" in doc_id or doc_id in (".", "..") or not is_document_id(doc_id):
        raise InvalidArgument(f"document id {doc_id[:40]!r} is invalid or reserved")


def encode_times(wanted: FlowFilter | None, after: Cursor | None) -> None:
    """OverflowError for a time Firestore's client cannot encode, as it raises."""
    times = (wanted.updated_from, wanted.updated_to) if wanted else ()
    for when in (*times, after.at if after else None):
        if when is not None:
            _helpers.encode_value(when)


def checking_id(method: Callable[..., Any]) -> Callable[..., Any]:
    def checked(doc_id: str, *args: Any, **kwargs: Any) -> Any:
        refuse_id(doc_id)
        return method(doc_id, *args, **kwargs)

    return checked


def checking_query(method: Callable[..., Any], *, by_id: bool = False) -> Callable[..., Any]:
    def checked(*args: Any, **kwargs: Any) -> Any:
        after = kwargs.get("after")
        encode_times(next((a for a in args if isinstance(a, FlowFilter)), None), after)
        if by_id and after is not None:  # a reference to the document the cursor names
            refuse_id(after.id)
        return method(*args, **kwargs)

    return checked


def like_firestore(store: MemoryStore) -> MemoryStore:
    """``store``, refusing what Firestore refuses: a read or write of a reserved document id
    (InvalidArgument, as the service answers) and a query or cursor whose time its client
    cannot encode (OverflowError, as ``_helpers.encode_value`` raises)."""
    for name in ("read", "get", "change", "change_versioned", "reject"):
        setattr(store, name, checking_id(getattr(store, name)))
    for name in ("flows", "summaries", "count_by_status"):
        setattr(store, name, checking_query(getattr(store, name)))
    store.rejected_messages = checking_query(store.rejected_messages, by_id=True)  # type: ignore[method-assign]
    return store


@pytest.fixture
def api() -> Api:
    built = build(Access(verifier=None))
    like_firestore(built.harness.store)
    built.running_flow("f-1")
    return built


def cursor_of(raw: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(raw).encode()).decode().rstrip("=")


# -- reserved ids ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/flows/__x__"),
        ("get", "/flows/__x__?tenant=default"),
        ("get", "/flows/__x__/lanes?tenant=default"),
        ("post", "/flows/__x__:cancel?tenant=default"),
        ("post", "/flows/__x__:retry?tenant=default"),
        ("get", "/console/flows/__x__"),
        ("get", "/console/flows/__x__/live"),
        ("get", "/console/flows/__x__/cancel"),
    ],
)
def test_a_reserved_firestore_id_in_a_flow_route_is_a_400(api: Api, method: str, path: str) -> None:
    response = getattr(api.client, method)(path, json={})
    assert response.status_code == 400, response.get_data(as_text=True)
    assert "flow id must not start and end with __" in response.get_data(as_text=True)


def test_a_reserved_id_in_a_callback_token_is_no_token(api: Api) -> None:
    response = api.client.post("/callbacks", json={"token": f"__x__.{'0' * 40}"})
    assert response.status_code == 409
    assert response.get_json()["reason"] == "not a callback token"


@pytest.mark.parametrize(
    "sent", ["", "a/b.c", "x" * 301, "tok\n.abc", 7, ["t"], {"t": 1}, "f-1.ab cd"]
)
def test_a_callback_token_that_cannot_be_one_is_a_400(api: Api, sent: Any) -> None:
    response = api.client.post("/callbacks", json={"token": sent, "output": {}})
    assert response.status_code == 400
    assert "token" in message(response) and len(message(response)) < 200


# -- times at the edges ---------------------------------------------------------------------


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("path", ["/flows", "/flows:counts", "/console/flows"])
@pytest.mark.parametrize("name", ["updated_from", "updated_to"])
def test_a_time_firestore_cannot_store_is_a_400(api: Api, edge: str, path: str, name: str) -> None:
    response = api.client.get(path, query_string={name: edge})
    assert response.status_code == 400, response.get_data(as_text=True)
    assert (
        f"{name} must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z in UTC"
        in response.get_data(as_text=True)
    )


def test_the_edges_themselves_are_times(api: Api) -> None:
    window = {"updated_from": "0001-01-01T00:00:00Z", "updated_to": "9999-12-31T23:59:59.999999Z"}
    assert [f["flow_id"] for f in api.client.get("/flows", query_string=window).json["flows"]] == [
        "f-1"
    ]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("path", ["/flows", "/rejected", "/console/flows", "/console/rejected"])
def test_a_cursor_at_a_time_firestore_cannot_store_is_a_400(api: Api, edge: str, path: str) -> None:
    response = api.client.get(path, query_string={"cursor": cursor_of([edge, "f-1"])})
    assert response.status_code == 400
    assert "cursor is not one this service gave out" in response.get_data(as_text=True)


@pytest.mark.parametrize(
    "cursor",
    [
        base64.urlsafe_b64encode(b"[" * 9000).decode(),  # nested too deep for json
        "A" * (MAX_CURSOR_CHARS + 1),  # megabytes of it, before any decoding
        cursor_of(["2026-03-01T12:00:00+00:00", "a/b"]),  # no document id
        cursor_of(["2026-03-01T12:00:00+00:00", "__x__"]),
        cursor_of(["2026-03-01T12:00:00+00:00", ".."]),
        cursor_of(["2026-03-01T12:00:00+00:00", "x" * 1501]),
        cursor_of(["2026-03-01T12:00:00+00:00", "\ud800"]),
    ],
)
@pytest.mark.parametrize("path", ["/flows", "/rejected"])
def test_a_cursor_no_page_could_end_with_is_a_400(api: Api, cursor: str, path: str) -> None:
    response = api.client.get(path, query_string={"cursor": cursor})
    assert response.status_code == 400
    assert "cursor" in message(response) and len(message(response)) < 200


def test_a_cursor_this_service_gives_out_decodes() -> None:
    at = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
    assert Cursor.decode(Cursor(at, "é" * 750).encode()) == Cursor(at, "é" * 750)


# -- numbers, bodies ------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["limit=" + "1" * 5000, "version=" + "9" * 5000, "limit=²"])
def test_a_number_int_would_refuse_is_a_400(api: Api, query: str) -> None:
    response = api.client.get(f"/flows?{query}")
    assert response.status_code == 400
    assert "must be an integer" in message(response)


@pytest.mark.parametrize("path", ["/flows/f-1:cancel", "/signals", "/callbacks"])
def test_a_body_nested_too_deep_is_a_400(api: Api, path: str) -> None:
    response = api.client.post(path, data="[" * 100_000, content_type="application/json")
    assert response.status_code == 400
    assert "nested too deep" in message(response)
    assert api.harness.flow("f-1").status.value == "RUNNING"


@pytest.mark.parametrize("path", ["/flows/f-1:cancel", "/callbacks", "/console/flows/f-1/cancel"])
def test_a_body_over_the_limit_is_a_413_in_the_json_error_shape(api: Api, path: str) -> None:
    big = json.dumps({"reason": "x" * MAX_REQUEST_BYTES})
    response = api.client.post(
        path, data=big, content_type="application/json", headers={"Origin": "http://127.0.0.1:8129"}
    )
    assert response.status_code == 413
    assert response.get_json()["error"] == {
        "code": 413,
        "status": "PAYLOAD_TOO_LARGE",
        "message": f"a request body is at most {MAX_REQUEST_BYTES} bytes",
    }


# -- the task route -------------------------------------------------------------------------


@pytest.fixture
def tasks() -> tuple[Harness, Any]:
    h = Harness(FLOW)
    like_firestore(h.store)
    runtime = Runtime(Settings(), load_topology(), h.engine, h.store, Counters())  # type: ignore[arg-type]
    return h, task_app(runtime, route="/tasks/step", verifier=None).test_client()


@pytest.mark.parametrize("name", ["a/b", "..", "__x__", "n" * 600, "tâche"])
def test_a_task_name_that_is_no_document_id_is_recorded_under_a_safe_one(
    tasks: tuple[Harness, Any], name: str
) -> None:
    h, client = tasks
    response = client.post(
        "/tasks/step", data=b"not a task", headers={"X-CloudTasks-TaskName": name}
    )
    assert response.status_code == 200 and response.get_json()["outcome"] == "rejected"
    (doc_id,) = h.store.rejected
    assert doc_id == rejected_task_id(name) and doc_id.startswith("task-")
    assert "/" not in doc_id and ".." not in doc_id and len(doc_id) <= 505
    assert h.store.rejected[doc_id]["task"] == name[:500]


@pytest.mark.parametrize(
    ("count", "retried"), [("4" * 5000, True), ("0" * 5000, False), ("²", False)]
)
def test_a_retry_count_int_would_refuse_is_read_as_digits(
    tasks: tuple[Harness, Any], count: str, retried: bool
) -> None:
    from relayflow.web.services import _retried

    h, client = tasks
    h.start("demo", {}, flow_id="f-1")
    task = h.queue.only()
    # A retry waits out the claim the create took for the first dispatch (409): past it.
    h.advance(Limits().claim_lease_s + Limits().first_delivery_within_s + 1)
    response = client.post(
        "/tasks/step",
        data=task.payload().model_dump_json(),
        headers={"X-CloudTasks-TaskName": task.next.task_id, "X-CloudTasks-TaskRetryCount": count},
    )
    assert response.status_code == 200
    assert _retried({"X-CloudTasks-TaskRetryCount": count}) is retried


def test_a_task_of_a_reserved_flow_id_is_rejected_not_retried(tasks: tuple[Harness, Any]) -> None:
    h, client = tasks
    h.start("demo", {}, flow_id="f-1")
    payload = json.loads(h.queue.only().payload().model_dump_json()) | {"flow_id": "__x__"}
    response = client.post("/tasks/step", json=payload)
    assert response.status_code == 200 and response.get_json()["outcome"] == "rejected"


def test_a_task_whose_poll_chain_is_malformed_is_rejected_with_why(
    tasks: tuple[Harness, Any],
) -> None:
    h, client = tasks
    h.start("demo", {}, flow_id="f-1")
    payload = json.loads(h.queue.only().payload().model_dump_json())
    note = {"at": "2030-01-01T00:00:00Z", "poll": 5, "seen": "not ready", "delay_s": 1.0}
    response = client.post("/tasks/step", json=payload | {"chain": [note]})
    assert response.status_code == 200 and response.get_json()["outcome"] == "rejected"
    assert "chain" in response.get_json()["reason"]


# -- tokens in the Authorization header -----------------------------------------------------


def nested_jwt() -> str:
    segment = base64.urlsafe_b64encode(b"[" * 3000).decode().rstrip("=")
    return f"Bearer {segment}.e30.c2ln"


def test_a_bearer_token_nested_too_deep_is_a_401_on_the_api() -> None:

    from .test_api import OPERATOR, verifier

    tokens = verifier(OPERATOR)
    cloud = build(Access(verifier=tokens, operators=frozenset({OPERATOR})))
    response = cloud.client.get("/flows", headers={"Authorization": nested_jwt()})
    assert response.status_code == 401
    assert "nested too deep" in message(response)


def test_a_bearer_token_nested_too_deep_is_a_401_on_a_task_route() -> None:

    from .test_api import verifier

    h = Harness(FLOW)
    tokens = verifier("t@x")
    runtime = Runtime(Settings(), load_topology(), h.engine, h.store, Counters())  # type: ignore[arg-type]
    client = task_app(runtime, route="/tasks/step", verifier=tokens).test_client()
    response = client.post("/tasks/step", json={}, headers={"Authorization": nested_jwt()})
    assert response.status_code == 401


def test_reasons_stay_short_whatever_was_sent(api: Api) -> None:
    long = "x" * 5000
    for response in (
        api.client.get(f"/flows?view={long}"),
        api.client.get(f"/nowhere/{long}"),
        api.client.delete(f"/flows/{long}"),
        api.client.get("/flows", query_string={"updated_from": long}),
        api.client.get("/flows", query_string={"tenant": long, "flow": long, "status": long}),
    ):
        assert 400 <= response.status_code < 500
        assert len(message(response)) < 300, message(response)[:80]
