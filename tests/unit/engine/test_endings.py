"""engine against in-memory ports: flows whose definition changed or is not deployed."""

from __future__ import annotations

import pytest

from relayflow.core.engine import Ran
from relayflow.core.errors import (
    UnknownFlow,
)
from relayflow.core.position import TaskPayload
from relayflow.core.state import Status

from .support import Harness


def test_a_task_for_a_flow_this_service_does_not_know_is_retried(h: Harness) -> None:
    # given a flow started by a newer deployment, whose definition this instance lacks
    h.start()
    h.store.docs["1001"]["flow"] = "from-the-future"
    # when its task arrives, then it raises (a 5xx), so Cloud Tasks delivers it again later
    with pytest.raises(UnknownFlow):
        h.deliver()
    assert h.reserve.calls == []


def test_a_position_the_definition_no_longer_has_ends_the_flow(h: Harness) -> None:
    # given a flow whose current step was renamed by a deploy while it waited
    h.start()
    h.store.docs["1001"]["tracks"]["reserve"]["position"]["step"] = "reserve_v0"
    renamed = h.record().position
    # when its task runs, then the flow FAILS as DEFINITION_CHANGED instead of crashing forever
    assert h.engine.run_task(TaskPayload(flow_id="1001", position=renamed)) is Ran.ADVANCED
    record = h.record()
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "DEFINITION_CHANGED"
    assert h.reserve.calls == []
