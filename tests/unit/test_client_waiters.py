"""The client's waiter table (relayflow.client.waiters): events matched to waiters in memory,
repeats, stale generations and unwanted events ignored, expectations bounded."""

from __future__ import annotations

from relayflow.client.waiters import FlowResult, Waiters
from relayflow.core.state import Status

KEY = ("default", "f1")


def end(generation: int = 0, status: Status = Status.SUCCEEDED, flow_id: str = "f1") -> FlowResult:
    return FlowResult(flow_id, "default", generation, status, "OK", "done", data={"g": generation})


def test_an_event_resolves_every_waiter_of_its_flow_once() -> None:
    table = Waiters()
    first, known = table.register(KEY)
    second, _ = table.register(KEY)
    assert (first is second, known) == (True, False)
    assert table.deliver(end()) is True
    assert first.result(timeout=0).data == {"g": 0}
    # the same event again, or the clean-up's, changes nothing
    assert table.deliver(end(status=Status.FAILED)) is False
    assert first.result(timeout=0).status is Status.SUCCEEDED
    assert table.ignored_unwanted == 1


def test_an_older_generation_is_ignored_and_a_newer_one_answers() -> None:
    table = Waiters()
    future, _ = table.register(KEY, min_generation=1)
    assert table.deliver(end(0)) is False
    assert (future.done(), table.ignored_stale) == (False, 1)
    assert table.deliver(end(2)) is True
    assert future.result(timeout=0).generation == 2


def test_an_event_no_one_waits_for_is_dropped_and_a_released_wait_forgets() -> None:
    table = Waiters()
    assert table.deliver(end(flow_id="other")) is False
    with table.waiting(KEY):
        assert table.wants(KEY)
    assert not table.wants(KEY) and len(table) == 0
    assert table.deliver(end()) is False  # late: its waiter timed out


def test_an_expected_end_is_kept_until_someone_waits() -> None:
    table = Waiters()
    table.expect(KEY)
    assert table.deliver(end()) is True
    future, known = table.register(KEY)
    assert known and future.result(timeout=0).data == {"g": 0}
    table.release(KEY)
    assert len(table) == 0


def test_expectations_are_bounded_oldest_first_and_spare_waited_ones() -> None:
    table = Waiters(max_expected=2)
    table.register(("default", "waited"))
    table.expect(("default", "waited"))
    for name in ("a", "b", "c"):
        table.expect(("default", name))
    assert set(table.keys()) == {("default", "waited"), ("default", "b"), ("default", "c")}
    _, known = table.register(("default", "a"))
    assert known is False  # dropped: the client reads the flow instead


def test_a_retried_flow_waits_for_its_new_run() -> None:
    table = Waiters()
    table.expect(KEY)
    table.deliver(end(0, Status.FAILED))
    table.expect(KEY, min_generation=1)  # retried
    future, _ = table.register(KEY, min_generation=1)
    assert not future.done()
    table.deliver(end(1))
    assert future.result(timeout=0).generation == 1


def test_a_result_is_read_from_an_ended_document_only() -> None:
    doc = {"flow_id": "f1", "tenant": "acme", "status": "RUNNING", "position": {"generation": 3}}
    assert FlowResult.from_document(doc) is None
    ended = {
        **doc,
        "status": "CANCELLED",
        "result": {"status": "CANCELLED", "code": "C", "message": "m"},
    }
    found = FlowResult.from_document(ended)
    assert found is not None and (found.tenant, found.generation) == ("acme", 3)
