"""The operator api in process: roles from verified tokens, the audit entry, lists by cursor
and view, counts, rejected messages, dead letters, and clear 400s for bad parameters.

Flows run in memory (relayflow.testing.Harness); tokens are real RS256 JWTs signed by the
Cloud Tasks emulator's issuer and verified by google-auth against its certs.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from flask.testing import FlaskClient

from relayflow.core.dead_letters import DeadLetter, Vet
from relayflow.core.errors import DeadLetterNotFound, NotReady, PermanentError
from relayflow.core.flows import (
    ActionStep,
    CallbackStep,
    Flow,
    PollPolicy,
    PollStep,
    Registry,
    StepContext,
)
from relayflow.core.state import Status
from relayflow.emulators.cloud_tasks.oidc import TokenIssuer
from relayflow.gcp.auth import TokenVerifier
from relayflow.metrics import Metrics
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.guard import RequestGuard
from relayflow.web.operations import Operations

API_URL = "https://api-abc-uc.a.run.app"
CERTS_URL = "https://certs.test/oauth2/v1/certs"
VIEWER, OPERATOR, STRANGER = "vi@example.com", "op@example.com", "eve@example.com"
# A system a callback step waits on, or the account that pushes flow-signals.
COMPLETER = "hook@partner.example"
ISSUER = TokenIssuer.generate()


def never_ready(ctx: StepContext) -> dict[str, Any]:
    raise NotReady("pending")


def refuse_bad(ctx: StepContext) -> dict[str, Any]:
    if ctx.input.get("bad") and ctx.generation == 0:
        raise PermanentError("refused", code="REFUSED")
    return {"ok": True}


FLOW = Flow(
    name="demo",
    steps=(
        ActionStep("reserve", refuse_bad, compensate=lambda ctx: {}),
        PollStep("await_ready", never_ready, policy=PollPolicy(initial_s=1, max_polls=50)),
    ),
)
# A flow that waits for an external system to complete its token.
WAIT = Flow(
    name="wait",
    steps=(CallbackStep("await_hook", lambda ctx: {"sent": True}, timeout_s=600),),
)


@dataclass
class FakeDeadLetters:
    letters: list[DeadLetter] = field(default_factory=list)
    replays: list[dict[str, Any]] = field(default_factory=list)

    def held(self, *, limit: int = 100) -> list[DeadLetter]:
        return self.letters[:limit]

    def replay(
        self,
        message_id: str,
        *,
        by: str,
        reason: str,
        data: bytes | None = None,
        vet: Vet | None = None,
    ) -> str:
        letter = next((m for m in self.letters if m.message_id == message_id), None)
        if letter is None:
            raise DeadLetterNotFound(f"no dead letter {message_id!r} is held")
        if data is not None and vet is not None:
            vet(letter, data)
        self.replays.append({"id": message_id, "by": by, "reason": reason, "data": data})
        return "new-1"


def certs_transport(url: str, method: str = "GET", **_: Any) -> Any:
    assert url == CERTS_URL
    return SimpleNamespace(status=200, data=json.dumps(ISSUER.certs()).encode(), headers={})


def token(email: str, audience: str = API_URL) -> dict[str, str]:
    signed = ISSUER.token(email=email, audience=audience, now_s=int(time.time()))
    return {"Authorization": f"Bearer {signed}"}


@dataclass
class Api:
    harness: Harness
    client: FlaskClient
    dead_letters: FakeDeadLetters

    def running_flow(self, flow_id: str) -> str:
        self.harness.start("demo", {}, flow_id=flow_id)
        self.harness.deliver_next(flow_id)
        self.harness.deliver_next(flow_id)
        return flow_id


def verifier(*emails: str) -> TokenVerifier:
    """Checks the test issuer's tokens for the api's audience, admitting ``emails``."""
    return TokenVerifier(
        audience=API_URL, allowed_emails=set(emails), certs_url=CERTS_URL, request=certs_transport
    )


def operations(h: Harness, access: Access, **extra: Any) -> Operations:
    """What the api works with over the harness ``h`` (no dead letters held unless ``extra``
    gives them)."""
    extra.setdefault("dead_letters", FakeDeadLetters())
    return Operations(
        engine=h.engine,
        store=h.store,
        access=access,
        counters=Counters(),
        metrics=Metrics(),
        **extra,
    )


def build(access: Access, guard: RequestGuard | None = None, **harness: Any) -> Api:
    h = Harness((FLOW, WAIT), **harness)
    letters = FakeDeadLetters()
    ops = operations(
        h,
        access,
        dead_letters=letters,
        registry=Registry((FLOW, WAIT)),
        guard=guard or RequestGuard(),
    )
    return Api(h, build_api(ops).test_client(), letters)


@pytest.fixture
def api() -> Iterator[Api]:
    yield build(
        Access(
            verifier=verifier(VIEWER, OPERATOR, COMPLETER),
            viewers=frozenset({VIEWER}),
            operators=frozenset({OPERATOR}),
            completers=frozenset({COMPLETER}),
        )
    )


@pytest.fixture
def local_api() -> Api:
    return build(Access(verifier=None))


def message(response: Any) -> str:
    return str(response.get_json()["error"]["message"])


# -- roles -------------------------------------------------------------------------------------


def test_a_viewers_cancel_is_refused_403_and_changes_nothing(api: Api) -> None:
    flow_id = api.running_flow("f-1")
    response = api.client.post(f"/flows/{flow_id}:cancel", headers=token(VIEWER), json={})
    assert response.status_code == 403
    assert message(response) == (
        "vi@example.com is a viewer and may not cancel flows: that needs the operator role "
        "(RELAYFLOW_API_OPERATORS)"
    )
    assert api.harness.flow(flow_id).status is Status.RUNNING


def test_a_viewer_may_read(api: Api) -> None:
    flow_id = api.running_flow("f-1")
    assert api.client.get(f"/flows/{flow_id}", headers=token(VIEWER)).status_code == 200
    assert api.client.get("/flows", headers=token(VIEWER)).status_code == 200
    me = api.client.get("/whoami", headers=token(VIEWER)).get_json()
    assert me == {"identity": VIEWER, "role": "viewer", "tenants": None}


def test_an_operators_cancel_is_recorded_with_who_and_why(api: Api) -> None:
    flow_id = api.running_flow("f-1")
    response = api.client.post(
        f"/flows/{flow_id}:cancel", headers=token(OPERATOR), json={"reason": "duplicate order"}
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    record = api.harness.run(flow_id)
    assert record is not None and record.status is Status.CANCELLED
    (entry,) = [e for e in record.history if e.outcome == "cancelled"]
    assert (entry.by, entry.detail) == (OPERATOR, "duplicate order")


def test_an_operators_retry_is_recorded_with_who_and_why(api: Api) -> None:
    api.harness.start("demo", {"bad": True}, flow_id="f-bad")
    assert api.harness.run("f-bad").status is Status.FAILED  # type: ignore[union-attr]
    response = api.client.post(
        "/flows/f-bad:retry", headers=token(OPERATOR), json={"reason": "client fixed"}
    )
    assert response.status_code == 200
    assert response.get_json()["position"]["generation"] == 1
    (entry,) = [e for e in api.harness.flow("f-bad").history if e.outcome == "restarted"]
    assert (entry.by, entry.detail) == (OPERATOR, "generation 1: client fixed")


@pytest.mark.parametrize(
    ("headers", "status", "says"),
    [
        ({}, 401, "missing 'Authorization: Bearer <token>' header"),
        ({"Authorization": "Bearer not-a-jwt"}, 401, "invalid token"),
        (token(OPERATOR, audience="https://elsewhere"), 401, "wrong audience"),
        (token(STRANGER), 403, "caller 'eve@example.com' may not call this service: add"),
    ],
)
def test_callers_without_a_valid_token_on_the_allowlists_are_refused(
    api: Api, headers: dict[str, str], status: int, says: str
) -> None:
    response = api.client.get("/flows", headers=headers)
    assert response.status_code == status
    assert says in message(response)


def waiting_flow(api: Api, flow_id: str) -> str:
    """A ``wait`` flow whose callback step has handed out its token; the token."""
    api.harness.start("wait", {}, flow_id=flow_id)
    api.harness.deliver_next(flow_id)
    return api.harness.token(flow_id, "await_hook")


def pushed(data: dict[str, Any]) -> dict[str, Any]:
    """A Pub/Sub push body carrying ``data``, as the flow-signals subscription sends it."""
    encoded = base64.b64encode(json.dumps(data).encode()).decode()
    return {"message": {"data": encoded, "messageId": "m-1"}, "subscription": "s"}


def test_a_completer_completes_a_callback_token_over_http(api: Api) -> None:
    hook = waiting_flow(api, "f-wait")
    response = api.client.post(
        "/callbacks", headers=token(COMPLETER), json={"token": hook, "output": {"id": "r-1"}}
    )
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["outcome"] == "completed"
    api.harness.run("f-wait")
    assert api.harness.flow("f-wait").status is Status.SUCCEEDED
    assert api.harness.flow("f-wait").outputs["await_hook"] == {"id": "r-1"}


def test_a_signal_pushed_by_a_completer_completes_its_token(api: Api) -> None:
    hook = waiting_flow(api, "f-wait")
    body = pushed({"token": hook, "output": {"id": "r-2"}})
    response = api.client.post("/signals", headers=token(COMPLETER), json=body)
    assert response.get_json()["outcome"] == "completed"
    api.harness.run("f-wait")
    assert api.harness.flow("f-wait").outputs["await_hook"] == {"id": "r-2"}


@pytest.mark.parametrize(
    ("route", "method"),
    [("/flows", "get"), ("/whoami", "get"), ("/flows/f-wait:cancel", "post")],
)
def test_a_completer_may_not_read_or_operate_flows(api: Api, route: str, method: str) -> None:
    waiting_flow(api, "f-wait")
    response = getattr(api.client, method)(route, headers=token(COMPLETER), json={})
    assert response.status_code == 403
    assert f"{COMPLETER} is a completer and may not" in message(response)
    assert api.harness.flow("f-wait").status is Status.RUNNING


def test_a_viewer_may_not_complete_a_callback_token(api: Api) -> None:
    hook = waiting_flow(api, "f-wait")
    response = api.client.post("/callbacks", headers=token(VIEWER), json={"token": hook})
    assert response.status_code == 403
    assert message(response) == (
        "vi@example.com is a viewer and may not complete callback tokens: that needs the "
        "completer role (RELAYFLOW_API_COMPLETERS or RELAYFLOW_API_OPERATORS)"
    )
    assert api.harness.flow("f-wait").tracks["await_hook"].token == hook


def test_an_operator_may_complete_a_callback_token(api: Api) -> None:
    hook = waiting_flow(api, "f-wait")
    response = api.client.post("/callbacks", headers=token(OPERATOR), json={"token": hook})
    assert response.get_json()["outcome"] == "completed"


def test_locally_the_api_is_open_to_this_machine_as_local(local_api: Api) -> None:
    flow_id = local_api.running_flow("f-1")
    assert local_api.client.get("/whoami").get_json() == {
        "identity": "local",
        "role": "operator",
        "tenants": None,
    }
    response = local_api.client.post(f"/flows/{flow_id}:cancel", json={"reason": "testing"})
    assert response.status_code == 200
    assert [e.by for e in local_api.harness.flow(flow_id).history if e.by] == ["local"]


def test_without_verification_a_remote_caller_is_refused(local_api: Api) -> None:
    response = local_api.client.get("/flows", environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert response.status_code == 403
    assert "admits only requests from this machine, not from 10.1.2.3" in message(response)


def test_a_cancel_without_a_reason_records_the_default_one(local_api: Api) -> None:
    flow_id = local_api.running_flow("f-1")
    bodiless = {"X-Relayflow-Request": "1"}  # what makes a browser ask first
    assert local_api.client.post(f"/flows/{flow_id}:cancel", headers=bodiless).status_code == 200
    (entry,) = [e for e in local_api.harness.flow(flow_id).history if e.by]
    assert entry.detail == "cancelled by an operator"


# -- lists -------------------------------------------------------------------------------------


def test_lists_are_summaries_by_default_and_whole_documents_on_request(local_api: Api) -> None:
    local_api.running_flow("f-1")
    (summary,) = local_api.client.get("/flows").get_json()["flows"]
    assert set(summary) == {
        "flow_id", "flow", "version", "tenant", "status", "position", "generation", "polls",
        "attempts",
        "created_at", "updated_at", "finished_at", "code", "cleanup", "labels", "dependency",
    }  # fmt: skip
    # a list shows the position the document has: poll 0's check was not ready and wrote
    # nothing (its poll chain carries it in poll 1's task; GET /flows/{id} shows it)
    assert summary["position"] == "await_ready poll 0"
    (full,) = local_api.client.get("/flows?view=full").get_json()["flows"]
    assert {"history", "input", "outputs", "tracks"} <= set(full)


def test_next_cursor_pages_through_every_flow_once(local_api: Api) -> None:
    for i in range(7):
        local_api.harness.start("demo", {}, flow_id=f"f-{i}")
        local_api.harness.advance(1)
    seen: list[str] = []
    path = "/flows?limit=3"
    while path:
        body = local_api.client.get(path).get_json()
        seen += [f["flow_id"] for f in body["flows"]]
        path = f"/flows?limit=3&cursor={body['next_cursor']}" if body["next_cursor"] else ""
    assert seen == [f"f-{i}" for i in reversed(range(7))]


def test_filters_and_counts_per_status(local_api: Api) -> None:
    h = local_api.harness
    local_api.running_flow("f-run")
    h.start("demo", {"bad": True}, flow_id="f-bad")
    h.run("f-bad")
    body = local_api.client.get("/flows?status=failed&counts=true").get_json()
    assert [f["flow_id"] for f in body["flows"]] == ["f-bad"]
    assert body["counts"]["FAILED"] == 1 and body["counts"]["RUNNING"] == 1
    assert local_api.client.get("/flows:counts?flow=demo").get_json()["total"] == 2
    assert local_api.client.get("/flows:counts?flow=other").get_json()["total"] == 0


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("status=sleeping", "status 'sleeping' is not one of PENDING, RUNNING"),
        ("limit=0", "limit must be an integer 1..500"),
        ("limit=abc", "limit must be an integer 1..500"),
        ("view=everything", "view must be one of summary, full"),
        ("cursor=bogus", "cursor: cursor is not one this service gave out"),
        ("version=0", "version must be an integer 1..1000000"),
        ("flow=Bad%20Name", "is not a flow name"),
        ("updated_from=yesterday", "updated_from must be an ISO 8601 time"),
        (
            "updated_from=2026-03-02T00:00:00Z&updated_to=2026-03-01",
            "updated_from must be before updated_to",
        ),
        ("counts=maybe", "counts must be true or false"),
        ("label=order_id", "label: label 'order_id' must be key=value, e.g. order_id=123"),
        ("label=Order%3D1", "label: label key 'Order' must match"),
        ("label=a%3D1&label=a%3D2", "label: label 'a' is given twice"),
        ("code=" + "X" * 101, "code must be 1..100 printable characters"),
        ("dependency=Payments", "dependency 'Payments' is not a dependency"),
    ],
)
def test_bad_list_parameters_get_400_naming_the_parameter(
    local_api: Api, query: str, says: str
) -> None:
    response = local_api.client.get(f"/flows?{query}")
    assert response.status_code == 400
    assert says in message(response)


def test_bad_ids_and_bodies_get_clear_errors(local_api: Api) -> None:
    assert "flow id must match" in message(local_api.client.get("/flows/bad%20id"))
    assert local_api.client.get("/flows/nope").status_code == 404
    not_json = local_api.client.post(
        "/flows/nope:cancel", data="[1]", content_type="application/json"
    )
    assert (not_json.status_code, message(not_json)) == (400, "the body must be a JSON object")
    long = local_api.client.post("/flows/nope:cancel", json={"reason": "x" * 501})
    assert "reason must be at most 500 printable characters" in message(long)


def test_cancelling_an_ended_flow_is_a_409(local_api: Api) -> None:
    local_api.harness.start("demo", {"bad": True}, flow_id="f-bad")
    local_api.harness.run("f-bad")
    response = local_api.client.post("/flows/f-bad:cancel", json={"reason": "late"})
    assert response.status_code == 409
    assert "illegal transition FAILED -> CANCELLED" in message(response)


# -- rejected messages and dead letters ----------------------------------------------------


def test_rejected_messages_are_listed_with_their_reasons(local_api: Api) -> None:
    local_api.harness.publish(b'{"flow": 7}', message_id="m-bad")
    (rejected,) = local_api.client.get("/rejected").get_json()["rejected"]
    assert rejected["id"] == "m-bad"
    assert rejected["data"] == '{"flow": 7}'
    assert "flow: Input should be a valid string" in rejected["reason"]


def test_dead_letters_are_listed_and_replayed_by_operators_only(api: Api) -> None:
    count = {"CloudPubSubDeadLetterSourceDeliveryCount": "5"}
    api.dead_letters.letters.append(DeadLetter("dl-1", b'{"flow": "demo"}', count, None))
    (listed,) = api.client.get("/dead-letters", headers=token(VIEWER)).get_json()["dead_letters"]
    assert (listed["message_id"], listed["delivery_count"]) == ("dl-1", 5)

    refused = api.client.post(
        "/dead-letters/dl-1:replay", headers=token(VIEWER), json={"reason": "fixed"}
    )
    assert refused.status_code == 403
    assert "may not replay dead letters" in message(refused)

    no_reason = api.client.post("/dead-letters/dl-1:replay", headers=token(OPERATOR), json={})
    assert "reason is required" in message(no_reason)

    fixed = {"flow": "demo", "input": {"n": 1}, "flow_id": "f-fixed"}
    replayed = api.client.post(
        "/dead-letters/dl-1:replay",
        headers=token(OPERATOR),
        json={"reason": "input fixed", "data": fixed},
    )
    assert replayed.get_json() == {"replayed": "dl-1", "message_id": "new-1"}
    (replay,) = api.dead_letters.replays
    assert (replay["by"], replay["reason"]) == (OPERATOR, "input fixed")
    assert json.loads(replay["data"]) == fixed


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("{oops", "the edited message: message data is not JSON"),
        ({"flow": "demo"}, "the edited message would be rejected: input: Field required"),
    ],
)
def test_an_edited_replay_that_would_be_rejected_is_refused_now(
    local_api: Api, data: Any, says: str
) -> None:
    local_api.dead_letters.letters.append(DeadLetter("dl-1", b"{}", {}, None))
    response = local_api.client.post(
        "/dead-letters/dl-1:replay", json={"reason": "try", "data": data}
    )
    assert response.status_code == 400
    assert says in message(response)
    assert local_api.dead_letters.replays == []


def test_an_edited_dead_signal_is_checked_as_a_signal_not_as_a_start_message(
    local_api: Api,
) -> None:
    signal = DeadLetter("dl-s", b'{"token": "t.x"}', {}, None, "flow-signals", signal=True)
    local_api.dead_letters.letters.append(signal)
    fixed = {"token": "t.x", "output": {"ok": True}}

    no_token = local_api.client.post(
        "/dead-letters/dl-s:replay", json={"reason": "try", "data": {"output": {}}}
    )
    replayed = local_api.client.post(
        "/dead-letters/dl-s:replay", json={"reason": "fixed", "data": fixed}
    )

    assert no_token.status_code == 400
    assert "a signal needs a string 'token'" in message(no_token)
    assert replayed.status_code == 200, replayed.get_json()
    (replay,) = local_api.dead_letters.replays
    assert json.loads(replay["data"]) == fixed


def test_replaying_a_letter_that_is_not_held_is_a_404(local_api: Api) -> None:
    response = local_api.client.post("/dead-letters/gone:replay", json={"reason": "again"})
    assert response.status_code == 404


def test_metrics_page_says_when_metrics_are_off(local_api: Api) -> None:
    body = local_api.client.get("/metrics").get_json()
    assert body["enabled"] is False
    assert "RELAYFLOW_METRICS_EXPORTER=local" in body["message"]


def test_settings_decide_whether_the_api_verifies_tokens() -> None:
    from relayflow.runtime import api_verifier
    from relayflow.settings import Settings
    from relayflow.web.access import access_from_settings

    local = Settings(api_verify_tokens=False)
    assert not access_from_settings(local, api_verifier(local)).verifying
    cloud = Settings(api_viewers=(VIEWER,), api_operators=(OPERATOR,), api_url=API_URL)
    assert access_from_settings(cloud, api_verifier(cloud)).verifying


def test_the_message_schemas_are_listed_and_served_to_viewers(api: Api) -> None:
    listed = api.client.get("/schemas", headers=token(VIEWER)).get_json()["schemas"]
    names = [(s["name"], s["version"], s["id"]) for s in listed]
    assert names == [
        ("start-message", 1, "urn:relayflow:schema:start-message:v1"),
        ("result-event", 1, "urn:relayflow:schema:result-event:v1"),
        ("signal-message", 1, "urn:relayflow:schema:signal-message:v1"),
    ]
    served = api.client.get("/schemas/start-message", headers=token(VIEWER))
    assert served.mimetype == "application/schema+json"
    assert served.get_json()["required"] == ["flow", "input"]
    missing = api.client.get("/schemas/nope", headers=token(VIEWER))
    assert missing.status_code == 404
    assert (
        "no schema is named 'nope'; the schemas are result-event, signal-message, start-message"
        in message(missing)
    )
    assert api.client.get("/schemas").status_code == 401


def test_definitions_show_each_flows_steps_and_schemas(local_api: Api) -> None:
    shown = local_api.client.get("/definitions").get_json()["definitions"]
    assert [(d["flow"], d["version"], d["newest"]) for d in shown] == [
        ("demo", 1, True),
        ("wait", 1, True),
    ]
    (one,) = local_api.client.get("/definitions?flow=wait").get_json()["definitions"]
    assert [(s["name"], s["kind"]) for s in one["steps"]] == [("await_hook", "callback")]
    assert (one["input_schema"], one["output_schema"]) == (None, None)
    missing = local_api.client.get("/definitions?flow=nope")
    assert missing.status_code == 404
    assert "no flow is named 'nope'; the flows are demo, wait" in message(missing)


def test_an_edited_dead_signal_message_is_checked_against_the_signal_schema(
    local_api: Api,
) -> None:
    signal = DeadLetter("dl-m", b'{"flow_id": "o-1", "signal": "approve"}', {}, None, "s", True)
    local_api.dead_letters.letters.append(signal)
    bad = {"flow_id": "o-1", "signal": "Approve!"}
    good = {"flow_id": "o-1", "signal": "approve", "data": {"po": "PO-1"}}

    refused = local_api.client.post("/dead-letters/dl-m:replay", json={"reason": "r", "data": bad})
    taken = local_api.client.post("/dead-letters/dl-m:replay", json={"reason": "r", "data": good})

    assert refused.status_code == 400
    assert "a signal message: signal: String should match pattern" in message(refused)
    assert taken.status_code == 200
    assert [json.loads(r["data"]) for r in local_api.dead_letters.replays] == [good]


# -- labels, codes and dependencies (issue 23) ---------------------------------------------------


def test_flows_are_listed_by_labels_given_repeated_or_in_one_parameter(local_api: Api) -> None:
    h = local_api.harness
    h.start("demo", {}, flow_id="l-1", labels={"order_id": "123", "region": "eu"})
    h.start("demo", {}, flow_id="l-2", labels={"order_id": "123", "region": "us"})
    h.start("demo", {}, flow_id="l-3")

    def listed(query: str) -> list[str]:
        response = local_api.client.get(f"/flows?{query}")
        assert response.status_code == 200, response.get_json()
        return [f["flow_id"] for f in response.get_json()["flows"]]

    assert listed("label=order_id%3D123") == ["l-2", "l-1"]
    assert listed("label=order_id%3D123&label=region%3Deu") == ["l-1"]
    assert listed("label=order_id%3D123+region%3Deu") == ["l-1"]  # the console's one field
    assert local_api.client.get("/flows/l-1").get_json()["labels"] == {
        "order_id": "123",
        "region": "eu",
    }
    counts = local_api.client.get("/flows:counts?label=order_id%3D123").get_json()
    assert counts["total"] == 2


def test_counts_by_more_than_one_label_are_refused_saying_why(local_api: Api) -> None:
    response = local_api.client.get("/flows:counts?label=a%3D1&label=b%3D2")
    assert response.status_code == 400
    assert "flows are counted by one label at most" in message(response)
    listed = local_api.client.get("/flows?label=a%3D1&label=b%3D2")
    assert listed.status_code == 200  # the list itself checks the second on what it finds


def test_flows_are_listed_by_result_code_and_dependency(local_api: Api) -> None:
    h = local_api.harness
    h.start("demo", {"bad": True}, flow_id="c-1")
    ended = h.run("c-1")
    assert ended is not None and ended.result is not None
    h.start("demo", {}, flow_id="c-2")
    by_code = local_api.client.get(f"/flows?code={ended.result.code}").get_json()
    assert [f["flow_id"] for f in by_code["flows"]] == ["c-1"]
    assert by_code["flows"][0]["code"] == ended.result.code
    by_dependency = local_api.client.get("/flows?dependency=nothing-calls-this").get_json()
    assert by_dependency["flows"] == []


def test_resolve_reads_offloaded_payloads_back_and_says_when_one_is_gone() -> None:
    local = build(Access(verifier=None), offload_threshold_bytes=1024)
    local.harness.start("demo", {"pad": "x" * 5000}, flow_id="big-1")
    local.harness.deliver_next("big-1")

    stored = local.client.get("/flows/big-1").get_json()
    shown = local.client.get("/flows/big-1?resolve=true").get_json()

    ref = stored["input"]["$relayflow"]["ref"]
    assert ref["size"] == len('{"pad":""}') + 5000 and set(ref) == {
        "bucket",
        "name",
        "sha256",
        "size",
    }
    assert shown["input"] == {"pad": "x" * 5000}
    del local.harness.blobs.objects[ref["name"]]
    gone = local.client.get("/flows/big-1?resolve=true")
    assert gone.status_code == 409 and gone.get_json()["error"]["status"] == "PAYLOAD_MISSING"
    bad = local.client.get("/flows/big-1?resolve=maybe")
    assert bad.status_code == 400 and "resolve must be true or false" in message(bad)
