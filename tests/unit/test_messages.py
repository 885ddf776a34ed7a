"""messages: a start message is accepted, or refused with a reason naming the fault."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import requests

from relayflow.apps.registration import ClientApi, RegistrationInput, registration_flow
from relayflow.core.errors import InvalidMessage
from relayflow.core.flows import PollPolicy, Registry, RetryPolicy
from relayflow.core.messages import MAX_INPUT_BYTES, decode_json, parse_start, unwrap_pubsub

DATA = Path(__file__).parents[1] / "data"
CANONICAL = {"flow": "registration", "input": {"resource": "acme-1"}}


def golden(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / name).read_text())
    return loaded


@pytest.fixture(scope="module")
def registry() -> Registry:
    # The handlers are never called here, so the client API is never contacted.
    api = ClientApi("http://client-api.invalid", timeout_s=1.0, session=requests.Session())
    return Registry((registration_flow(api, poll=PollPolicy(), retry=RetryPolicy()),))


def encode(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


def reason_for(data: bytes, registry: Registry) -> str:
    with pytest.raises(InvalidMessage) as info:
        parse_start(data, registry)
    return info.value.reason


def test_the_canonical_message_is_accepted(registry: Registry) -> None:
    message, flow = parse_start(encode(CANONICAL), registry)
    assert flow.name == "registration"
    assert flow.input_model is RegistrationInput
    assert message.input == {"resource": "acme-1"}
    assert (message.flow_id, message.deadline_s) == (None, None)


def test_a_message_with_every_optional_field_is_accepted(registry: Registry) -> None:
    body = {**CANONICAL, "flow_id": "order-42_a", "deadline_s": 600}
    message, _ = parse_start(encode(body), registry)
    assert (message.flow_id, message.deadline_s) == ("order-42_a", 600.0)


@pytest.mark.parametrize(
    ("data", "mentions"),
    [
        (b"", "message has no data"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"{flow: registration}", "not JSON"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b'"registration"', "must be a JSON object, got str"),
    ],
    ids=["empty", "not-utf8", "not-json", "array", "string"],
)
def test_undecodable_data_is_refused_with_a_reason(
    data: bytes, mentions: str, registry: Registry
) -> None:
    assert mentions in reason_for(data, registry)


@pytest.mark.parametrize(
    ("body", "mentions"),
    [
        ({"input": {"resource": "acme-1"}}, "flow: Field required"),
        ({"flow": "registration"}, "input: Field required"),
        ({**CANONICAL, "input": ["acme-1"]}, "input: Input should be a valid dictionary"),
        ({**CANONICAL, "input": "acme-1"}, "input: Input should be a valid dictionary"),
        ({**CANONICAL, "flow_id": "a/b"}, "flow_id: String should match pattern"),
        ({**CANONICAL, "flow_id": "a" * 101}, "flow_id: String should match pattern"),
        ({**CANONICAL, "flow_id": ""}, "flow_id: String should match pattern"),
        ({**CANONICAL, "deadline_s": 0}, "deadline_s: Input should be greater than 0"),
        ({**CANONICAL, "deadline_s": -5}, "deadline_s: Input should be greater than 0"),
        ({**CANONICAL, "deadline_s": "600"}, "deadline_s: Input should be a valid number"),
        ({**CANONICAL, "deadline_s": True}, "deadline_s: Input should be a valid number"),
        ({**CANONICAL, "deadline_s": 31 * 86400}, "deadline_s: Input should be less than"),
        ({**CANONICAL, "urgency": "high"}, "urgency: Extra inputs are not permitted"),
        ({**CANONICAL, "priority": "urgent"}, "priority: Input should be 'high' or 'low'"),
        ({**CANONICAL, "tenant": "Acme Corp"}, "tenant: String should match pattern"),
    ],
    ids=[
        "no-flow", "no-input", "input-array", "input-string", "flow-id-slash", "flow-id-101",
        "flow-id-empty", "deadline-zero", "deadline-negative", "deadline-string", "deadline-bool",
        "deadline-beyond-30-days", "extra-field", "priority-unknown", "tenant-bad",
    ],
)  # fmt: skip
def test_a_message_breaking_the_schema_is_refused_naming_the_field(
    body: dict[str, Any], mentions: str, registry: Registry
) -> None:
    assert mentions in reason_for(encode(body), registry)


def test_an_unknown_flow_is_refused_listing_the_registered_flows(registry: Registry) -> None:
    reason = reason_for(encode({**CANONICAL, "flow": "payment"}), registry)
    assert reason == "unknown flow 'payment' (registered: registration)"


@pytest.mark.parametrize(
    ("input_", "mentions"),
    [
        ({}, "input.resource: Field required"),
        ({"resource": "acme 1"}, "input.resource: String should match pattern"),
        ({"resource": "acme-1", "colour": "red"}, "input.colour: Extra inputs are not permitted"),
    ],
)
def test_input_failing_the_flows_model_is_refused_naming_the_input_field(
    input_: dict[str, Any], mentions: str, registry: Registry
) -> None:
    assert mentions in reason_for(encode({**CANONICAL, "input": input_}), registry)


def test_input_over_64_kib_is_refused_with_its_size(registry: Registry) -> None:
    body = {**CANONICAL, "input": {"resource": "acme-1", "blob": "x" * MAX_INPUT_BYTES}}
    reason = reason_for(encode(body), registry)
    assert reason.startswith("input is ")
    assert reason.endswith(f"bytes; the limit is {MAX_INPUT_BYTES}")


def test_input_just_under_the_limit_reaches_the_input_model(registry: Registry) -> None:
    # The size check passes, so the refusal comes from the model (the extra field), not the size.
    body = {**CANONICAL, "input": {"resource": "acme-1", "b": "x" * (MAX_INPUT_BYTES - 100)}}
    assert reason_for(encode(body), registry) == "input.b: Extra inputs are not permitted"


def test_decode_json_returns_the_object() -> None:
    assert decode_json(b'{"a": 1}') == {"a": 1}


# -- unwrap_pubsub ----------------------------------------------------------------------------


def test_a_push_body_is_unwrapped_and_its_data_decoded(registry: Registry) -> None:
    # given the push body exactly as the Pub/Sub emulator sends it
    body = golden("pubsub_push.json")
    # when it is unwrapped
    envelope = unwrap_pubsub(body)
    # then the message id, attributes and decoded data come out, and the data is a start message
    assert envelope.message_id == "11"
    assert envelope.attributes == {"origin": "orders"}
    assert json.loads(envelope.data) == CANONICAL
    assert parse_start(envelope.data, registry)[1].name == "registration"


def test_an_eventarc_cloudevent_data_is_unwrapped() -> None:
    event = golden("eventarc_cloudevent.json")
    envelope = unwrap_pubsub(event["data"])
    assert envelope.message_id == event["id"]
    assert envelope.attributes == {}
    assert json.loads(envelope.data) == CANONICAL


@pytest.mark.parametrize("only", ["messageId", "message_id"])
def test_either_spelling_of_the_message_id_is_enough(only: str) -> None:
    body = golden("pubsub_push.json")
    other = "message_id" if only == "messageId" else "messageId"
    del body["message"][other]
    assert unwrap_pubsub(body).message_id == "11"


def test_a_message_without_data_unwraps_to_empty_data() -> None:
    body = golden("pubsub_push.json")
    del body["message"]["data"]
    assert unwrap_pubsub(body).data == b""


@pytest.mark.parametrize(
    ("event", "mentions"),
    [
        ({}, "no Pub/Sub 'message' object"),
        (None, "no Pub/Sub 'message' object"),
        ({"message": "hello"}, "no Pub/Sub 'message' object"),
        ({"message": {"data": "e30="}}, "no message id"),
        ({"message": {"data": "e30=", "messageId": ""}}, "no message id"),
        ({"message": {"data": "not base64!", "messageId": "1"}}, "not valid base64"),
        ({"message": {"data": 42, "messageId": "1"}}, "not valid base64"),
        ({"message": {"messageId": "1", "attributes": ["a"]}}, "attributes must be an object"),
    ],
    ids=[
        "empty",
        "none",
        "message-not-object",
        "no-id",
        "empty-id",
        "bad-b64",
        "data-int",
        "attrs",
    ],
)
def test_a_malformed_event_is_refused_with_a_reason(event: Any, mentions: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        unwrap_pubsub(event)
    assert mentions in info.value.reason


def test_golden_payload_data_is_real_base64_of_the_canonical_message() -> None:
    data = golden("pubsub_push.json")["message"]["data"]
    assert json.loads(base64.b64decode(data)) == CANONICAL


# -- every Firestore id rule; every reason bounded and naming what was wrong (issue 7) --------


@pytest.mark.parametrize("flow_id", ["__x__", "__reserved__", "____"])
def test_a_flow_id_firestore_reserves_is_refused_at_the_start(
    registry: Registry, flow_id: str
) -> None:
    reason = reason_for(encode({**CANONICAL, "flow_id": flow_id}), registry)
    assert reason.startswith("flow_id: ")
    assert "'__'" in reason


def test_ids_that_merely_contain_underscores_are_fine(registry: Registry) -> None:
    message, _ = parse_start(encode({**CANONICAL, "flow_id": "__x"}), registry)
    assert message.flow_id == "__x"


def test_tens_of_thousands_of_unknown_keys_give_a_short_reason_that_counts_them(
    registry: Registry,
) -> None:
    body = {**CANONICAL, **{f"extra_{i}": i for i in range(50_000)}}
    reason = reason_for(encode(body), registry)
    assert len(reason.encode("utf-8")) <= 1024
    assert reason.startswith("extra_0: Extra inputs are not permitted")
    assert "and 49995 more errors" in reason


def test_a_lone_surrogate_in_a_key_is_named(registry: Registry) -> None:
    data = b'{"flow": "registration", "input": {"resource": "acme-1", "bad\\udc80key": 1}}'
    reason = reason_for(data, registry)
    assert "lone surrogate" in reason
    assert "bad\\udc80key" in reason  # named, escaped so the reason itself is valid text


@pytest.mark.parametrize(
    "value",
    [{"k" * 1600: 1}, {"a" * 700: {"b" * 700: 1}}, {"é" * 700: 1}],
    ids=["one-long-key", "a-long-path", "multibyte"],
)
def test_an_input_key_or_path_over_firestores_field_limit_is_refused(
    registry: Registry, value: dict[str, Any]
) -> None:
    reason = reason_for(encode({**CANONICAL, "input": {**CANONICAL["input"], **value}}), registry)
    assert "Firestore stores a field path of at most 1,500 bytes" in reason
    assert len(reason) < 400  # the key is named, not copied whole
