"""The api's long-poll (GET /flows/{id}?wait_s=, relayflow.web.longpoll) in process: flows run
in memory (relayflow.testing.Harness) and a fake watch stands for the Firestore listener,
ending the flow from another thread while the request waits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from relayflow.core.flows import CallbackStep, Flow, Registry, StepContext
from relayflow.core.records import FlowRecord
from relayflow.metrics import Metrics
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.web import longpoll
from relayflow.web.access import Access
from relayflow.web.api import build_api
from relayflow.web.operations import Operations
from tests.unit.test_api import FakeDeadLetters


def hand_out(ctx: StepContext) -> dict[str, Any]:
    return {}


WAITS = Flow(name="waits", steps=(CallbackStep("approval", hand_out, timeout_s=600),))


class FakeWatch:
    """Gives the current document at once (as a listener's first snapshot), then runs
    ``then`` on a thread of its own and gives the document again (the next snapshot)."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.then: Callable[[], None] | None = None
        self.watched: list[str] = []
        self.stopped = 0

    def __call__(self, key: str, on_change: longpoll.OnChange) -> Callable[[], None]:
        self.watched.append(key)
        on_change(self.harness.store.get(key))
        if self.then is not None:
            change = self.then

            def later() -> None:
                change()
                on_change(self.harness.store.get(key))

            threading.Thread(target=later).start()
        return self.stop

    def stop(self) -> None:
        self.stopped += 1


def build() -> tuple[Harness, FakeWatch, FlaskClient]:
    h = Harness((WAITS,))
    watch = FakeWatch(h)
    ops = Operations(
        engine=h.engine,
        store=h.store,
        access=Access(verifier=None),
        dead_letters=FakeDeadLetters(),
        counters=Counters(),
        metrics=Metrics(),
        registry=Registry((WAITS,)),
        watch=watch,
    )
    return h, watch, build_api(ops).test_client()


def waiting(h: Harness, flow_id: str) -> str:
    h.start("waits", {}, flow_id=flow_id)
    h.deliver_next(flow_id)
    return flow_id


def test_a_wait_answers_when_the_flow_ends() -> None:
    h, watch, client = build()
    flow_id = waiting(h, "f-1")
    watch.then = lambda: h.engine.cancel(flow_id, "ended while the request waits")
    answer = client.get(f"/flows/{flow_id}?wait_s=30")
    assert answer.status_code == 200
    assert answer.get_json()["status"] == "CANCELLED"
    assert (watch.watched, watch.stopped) == ([flow_id], 1)


def test_an_ended_flow_answers_at_once_without_a_listener() -> None:
    h, watch, client = build()
    flow_id = waiting(h, "f-2")
    h.engine.cancel(flow_id, "ended before")
    assert client.get(f"/flows/{flow_id}?wait_s=30").get_json()["status"] == "CANCELLED"
    assert watch.watched == []


def test_a_wait_for_a_later_generation_is_not_answered_by_an_earlier_end() -> None:
    h, _, client = build()
    flow_id = waiting(h, "f-3")
    h.engine.cancel(flow_id, "generation 0 ends")
    doc = client.get(f"/flows/{flow_id}?wait_s=0.01&generation=1").get_json()
    assert (doc["status"], doc["position"]["generation"]) == ("CANCELLED", 0)  # as it is


def test_a_wait_that_runs_out_answers_the_flow_as_it_is() -> None:
    h, watch, client = build()
    flow_id = waiting(h, "f-4")
    assert client.get(f"/flows/{flow_id}?wait_s=0.01").get_json()["status"] == "RUNNING"
    assert watch.stopped == 1


def test_a_flow_not_there_yet_is_waited_for_and_one_never_made_is_404() -> None:
    h, watch, client = build()
    watch.then = lambda: h.engine.cancel(waiting(h, "f-5"), "started, then ended")
    assert client.get("/flows/f-5?wait_s=30").get_json()["status"] == "CANCELLED"
    watch.then = None
    assert client.get("/flows/f-6?wait_s=0.01").status_code == 404


def test_bad_waits_are_400s_that_name_the_parameter() -> None:
    h, _, client = build()
    flow_id = waiting(h, "f-7")
    for query, named in (
        ("wait_s=soon", "wait_s"),
        ("wait_s=61", "wait_s"),
        ("wait_s=nan", "wait_s"),
        ("wait_s=1&generation=-1", "generation"),
    ):
        answer = client.get(f"/flows/{flow_id}?{query}")
        assert answer.status_code == 400, query
        assert named in answer.get_json()["error"]["message"]


def test_has_ended_needs_an_end_in_the_generation_waited_for() -> None:
    assert not longpoll.has_ended(None, 0)
    h, _, _ = build()
    h.engine.cancel(waiting(h, "f-8"), "end")
    record = h.store.get("f-8")
    assert isinstance(record, FlowRecord)
    assert longpoll.has_ended(record, 0) and not longpoll.has_ended(record, 1)
