"""The signal message's shape: what a publisher may send on ``flow-signals``, and what an
edited replay of a dead signal is checked against before it is published."""

from __future__ import annotations

import pytest

from relayflow.core.signal_messages import SignalMessage, is_signal, shape_problem


def test_a_signal_names_its_flow_and_signal_and_may_carry_the_rest() -> None:
    message = SignalMessage.model_validate(
        {"flow_id": "order-7", "signal": "approve", "data": {"po": "PO-1"}, "signal_id": "s-1"}
    )
    assert (message.flow_id, message.signal, message.data) == ("order-7", "approve", {"po": "PO-1"})
    assert shape_problem({"flow_id": "order-7", "signal": "approve"}) == ""


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"signal": "approve"}, "flow_id: Field required"),
        ({"flow_id": "o-1", "signal": "Approve!"}, "signal: String should match pattern"),
        ({"flow_id": "o-1", "signal": "approve", "data": [1]}, "data: Input should be a valid"),
        ({"flow_id": "o-1", "signal": "approve", "colour": "red"}, "colour: Extra inputs"),
        ({"output": {}}, "a signal needs a string 'token'"),
    ],
)
def test_a_malformed_message_is_named_with_what_is_wrong(
    body: dict[str, object], says: str
) -> None:
    assert says in shape_problem(body)


def test_a_token_makes_it_a_callback_completion_not_a_signal() -> None:
    assert is_signal({"flow_id": "o-1", "signal": "approve"})
    assert not is_signal({"token": "t.x", "signal": "approve"})
    assert shape_problem({"token": "t.x", "output": {"ok": True}}) == ""
