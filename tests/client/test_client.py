"""relayflow.Client against the local stack (tests/client/client_app.py, on a stack of its own
at port block +900): every way a flow ends, 1,000 handles on one subscription, the api's
long-poll, duplicate and late events, a timeout that says where the flow is.

Nothing sleeps: waits end on events or long-polls; where a test must know a background event
was handled it polls a counter of the client's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore, pubsub_v1

from relayflow.client import (
    ApiError,
    AsyncClient,
    Client,
    FlowFailed,
    InvalidMessage,
    Start,
    WaitTimeout,
)
from relayflow.core.state import Status
from relayflow.gcp.store import FlowStore
from relayflow.local.environment import relayflow_env
from relayflow.local.polling import poll_until
from relayflow.local.ports import Ports
from relayflow.local.stack import Stack
from tests.client import client_app
from tests.conftest import TEST_BASE_PORT

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent
PORTS = Ports(TEST_BASE_PORT + 900)
APP = "client_app:registry"
PROJECT = "relayflow-local"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    stack = Stack(
        ports=PORTS,
        state_dir=tmp_path_factory.mktemp("client-stack"),
        app=APP,
        app_path=HERE,
        sweep_interval_s=0,
        base_env={**os.environ, "PYTHONPATH": path, "RELAYFLOW_RETRY_MAX_ATTEMPTS": "2"},
    )
    stack.up()
    variables = relayflow_env(PORTS, app=APP)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():  # the Google clients read the emulator hosts
            patch.setenv(name, value)
        try:
            yield variables
        finally:
            stack.down()


@pytest.fixture
def client(env: dict[str, str]) -> Iterator[Client]:
    with Client(environ=env, registry=client_app.registry) as c:
        yield c


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def token_of(client: Client, flow_id: str, step: str) -> str:
    """The callback token the flow's step waits with (the local api shows it: operator)."""
    found: list[str] = []

    def waiting() -> bool:
        try:
            doc = client.get(flow_id).status().document
        except Exception:  # not created yet
            return False
        token = ((doc.get("tracks") or {}).get(step) or {}).get("token")
        if token:
            found.append(str(token))
        return bool(found)

    assert poll_until(waiting, timeout_s=30), f"{flow_id} never waited at {step}"
    return found[0]


def test_start_to_result_for_every_end(client: Client) -> None:
    client.listen()
    assert client.start("echo", {"x": 7}).result(timeout=30) == {"x": 7}

    with pytest.raises(FlowFailed) as failed:
        client.start("fails", {}).result(timeout=30)
    assert (failed.value.status, failed.value.result.code) == (Status.FAILED, "NOPE")

    with pytest.raises(FlowFailed) as expired:
        client.start("expires", {}).result(timeout=30)
    assert expired.value.status is Status.TIMED_OUT

    waiting = client.start("waits", {})
    token_of(client, waiting.flow_id, "approval")
    waiting.cancel("the test cancels it")
    cancelled = waiting.wait(timeout=30)
    assert cancelled.status is Status.CANCELLED

    # and a callback completed through the client ends its flow with the completion's output
    approved = client.start("waits", {})
    token = token_of(client, approved.flow_id, "approval")
    outcome = client.complete_callback(token, output={"ok": True})
    assert outcome.outcome == "completed"
    assert approved.result(timeout=30) == {"ok": True}
    again = client.complete_callback(token, output={})
    assert again.outcome == "ignored"


def test_a_typed_flow_s_result_is_its_output_model(client: Client, env: dict[str, str]) -> None:
    client.listen()
    handle = client.start("doubled", {"x": 21})
    assert handle.result(timeout=30) == client_app.Doubled(twice=42)
    with Client(environ=env) as untyped:  # without the registry: the data as it came
        assert untyped.get(handle.flow_id).result(timeout=10) == {"twice": 42}

    with pytest.raises(FlowFailed) as mistyped:
        client.start("mistyped", {}).result(timeout=30)
    assert mistyped.value.result.code == "OUTPUT_INVALID"
    assert "is not a Doubled: twice:" in mistyped.value.result.message


def test_a_flow_that_ended_before_anyone_waited_is_read_once(env: dict[str, str]) -> None:
    flow_id = new_id("early")
    with Client(environ=env) as starter:
        starter.start("echo", {"x": 1}, flow_id=flow_id)
    with Client(environ=env) as other:
        handle = other.get(flow_id)
        assert poll_until(lambda: _ended(handle), timeout_s=30)
        # its event went out before this client subscribed: the read at registration finds it
        assert handle.result(timeout=10) == {"x": 1}
        assert other.subscription().delivered == 0
        page = other.list(flow="echo", limit=500)
        assert flow_id in {f["flow_id"] for f in page.flows}


def test_bad_starts_fail_at_the_call_and_publish_nothing(client: Client) -> None:
    cases = [
        (("echo", {"x": "seven"}), {}, "input.x:"),
        (("echo", {"x": 1}), {"flow_id": "__reserved__"}, "Firestore reserves ids"),
        (("nope", {}), {}, "nope"),
        (("echo", {"x": 1}), {"tenant": "Not A Tenant"}, "tenant"),
        (("echo", {"x": 1}), {"priority": "urgent"}, "priority"),
        (("echo", {"x": 1}), {"deadline_s": 10**9}, "deadline_s"),
    ]
    for args, kwargs, reason in cases:
        with pytest.raises(InvalidMessage) as refused:
            client.start(*args, **kwargs)
        assert reason in refused.value.reason
    with pytest.raises(InvalidMessage, match=r"start #1: input\.x"):
        client.start_many([Start("echo", {"x": 1}), Start("echo", {"x": "a"})])
    assert client._single is None and client._batched is None  # no publisher was ever made


def test_1000_handles_awaited_at_once_on_one_subscription(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    async def run() -> tuple[float, float, float, list[Any]]:
        async with AsyncClient(environ=env) as client:
            await client.listen()
            began, cpu = time.perf_counter(), time.process_time()
            handles = await client.start_many(Start("echo", {"x": i}) for i in range(1000))
            started = time.perf_counter() - began
            results = await asyncio.gather(*(h.result(timeout=240) for h in handles))
            elapsed, used = time.perf_counter() - began, time.process_time() - cpu
            assert client.sync.subscription().delivered == 1000
            assert len(client.sync.subscription().waiters) == 0
            return started, elapsed, used, results

    started, elapsed, cpu, results = asyncio.run(run())
    assert results == [{"x": i} for i in range(1000)]
    with capsys.disabled():
        print(
            f"\n1,000 handles, one subscription: started in {started:.2f} s, all resolved "
            f"{elapsed:.2f} s after the first publish; client CPU {cpu:.2f} s "
            f"({cpu:.2f} ms a flow, starting included)"
        )


def test_the_long_poll_answers_within_100_ms_of_the_end(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(environ=env, wait="api") as client:
        handle = client.start("waits", {})
        token = token_of(client, handle.flow_id, "approval")
        ended_at: list[float] = []

        def seen(docs: list[Any], *_: object) -> None:
            for doc in docs:
                if doc.exists and doc.to_dict().get("status") == "SUCCEEDED" and not ended_at:
                    ended_at.append(doc.update_time.timestamp())

        store = FlowStore(firestore.Client(project=PROJECT))
        listener = store.reference(handle.flow_id).on_snapshot(seen)
        asked = threading.Event()
        real_get = client.api.get

        def get(path: str, query: Any = None, **kwargs: Any) -> dict[str, Any]:
            asked.set()
            return real_get(path, query, **kwargs)

        client.api.get = get  # type: ignore[method-assign]
        answered: list[tuple[float, Any]] = []

        def wait() -> None:
            ended = handle.wait(timeout=30)
            answered.append((time.time(), ended))

        waiter = threading.Thread(target=wait)
        waiter.start()
        assert asked.wait(10)
        client.complete_callback(token, output={"ok": True})
        waiter.join(30)
        at, ended = answered[0]
        assert ended.status is Status.SUCCEEDED
        # The end is the commit that made the flow SUCCEEDED: its Firestore commit time, as
        # this test's own listener saw it (later writes move the document's update_time on).
        # The listener is stopped after the answer, so it saw that commit's snapshot.
        assert poll_until(lambda: bool(ended_at), timeout_s=10)
        listener.unsubscribe()
        margin_s = at - ended_at[0]
        with capsys.disabled():
            print(f"\nlong-poll answered {margin_s * 1000:.1f} ms after the ending commit")
        assert margin_s < 0.100


def test_duplicate_late_and_unwanted_events_change_nothing(client: Client) -> None:
    client.listen()
    subscription = client.subscription()
    handle = client.start("waits", {})
    token_of(client, handle.flow_id, "approval")
    handle.cancel("end generation 0")
    assert handle.wait(timeout=30).status is Status.CANCELLED
    handle.retry("run it again")
    assert handle.generation == 1
    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(PROJECT, "flow-results")

    def publish(status: str, generation: int, flow_id: str = handle.flow_id) -> None:
        body = {"flow_id": flow_id, "tenant": "default", "generation": generation}
        body |= {"status": status, "code": "X", "message": "replayed", "event": "result"}
        attributes = {"flow_id": flow_id, "tenant": "default", "generation": str(generation)}
        publisher.publish(topic, json.dumps(body).encode(), **attributes).result(timeout=30)

    future = client.register(handle)
    try:
        publish("CANCELLED", 0)  # generation 0's event, late: not this wait's end
        assert poll_until(lambda: subscription.waiters.ignored_stale >= 1, timeout_s=30)
        assert not future.done()
        client.complete_callback(token_of(client, handle.flow_id, "approval"), output={"n": 2})
        ended = future.result(timeout=30)
        assert (ended.status, ended.generation, ended.data) == (Status.SUCCEEDED, 1, {"n": 2})
        unwanted = subscription.waiters.ignored_unwanted
        publish("SUCCEEDED", 1)  # the same end again: the waiter has it already
        assert poll_until(lambda: subscription.waiters.ignored_unwanted > unwanted, timeout_s=30)
        assert future.result().data == {"n": 2}
    finally:
        client.release(handle)
    publish("FAILED", 0, flow_id=new_id("nobody"))  # no one waits: dropped unparsed
    assert handle.result(timeout=10) == {"n": 2}


def test_a_timeout_says_where_the_flow_is(client: Client) -> None:
    handle = client.start("waits", {})
    token_of(client, handle.flow_id, "approval")
    with pytest.raises(WaitTimeout) as timed_out:
        handle.result(timeout=0.3)
    message = str(timed_out.value)
    assert handle.flow_id in message
    assert "RUNNING at step 'approval'" in message and "generation 0" in message
    assert timed_out.value.position is not None
    handle.cancel("done with it")


def test_a_signal_sent_through_the_handle_ends_the_wait(client: Client) -> None:
    client.listen()
    handle = client.start("decides", {})
    assert poll_until(lambda: _exists(handle), timeout_s=30), f"{handle.flow_id} never created"

    sent = handle.signal("approve", {"po": "PO-7"}, reason="budget ok", signal_id="sig-1")
    # delivered if the wait had begun, kept (and consumed when it does) if not
    assert sent["outcome"] in ("delivered", "kept") and sent["flow_id"] == handle.flow_id
    again = handle.signal("approve", {"po": "PO-8"}, reason="resent", signal_id="sig-1")
    assert again["outcome"] == "duplicate"

    output = handle.result(timeout=30)
    assert output["signal"] == "approve" and output["data"] == {"po": "PO-7"}
    assert output["by"]  # the api recorded who sent it
    with pytest.raises(ApiError) as ended:
        handle.signal("reject", reason="too late")
    assert ended.value.status == 409 and "FAILED_PRECONDITION" in str(ended.value)
    with pytest.raises(ApiError) as unknown:
        client.get("no-such-flow-" + uuid.uuid4().hex[:6]).signal("approve")
    assert unknown.value.status == 404


def test_the_async_handle_signals_too(env: dict[str, str]) -> None:
    async def run() -> Any:
        async with AsyncClient(environ=env) as client:
            await client.listen()
            handle = await client.start("decides", {})
            assert await asyncio.to_thread(poll_until, lambda: _exists(handle.sync), timeout_s=30)
            answer = await handle.signal("reject", {"why": "no"}, reason="no budget")
            assert answer["outcome"] in ("delivered", "kept")
            return await handle.result(timeout=30)

    assert asyncio.run(run())["signal"] == "reject"


def test_a_handle_resets_its_ended_flow_to_a_step_after_a_dry_run(env: dict[str, str]) -> None:
    async def run() -> tuple[dict[str, Any], Any, Any]:
        async with AsyncClient(environ=env, wait="api") as client:  # long-polls: no listening
            handle = await client.start("echo", {"x": 3})
            await handle.result(timeout=30)
            preview = await handle.preview_reset("echo")
            status = await handle.reset("echo", "echo again")
            return preview, status, await handle.wait(timeout=30)

    preview, status, ended = asyncio.run(run())
    # echo has no undo: its effect is kept, and the step replays it under its key
    assert (preview["allowed"], preview["rerun"], preview["undone"]) == (True, ["echo"], [])
    assert preview["detail"]["replayed"] == ["echo"]
    assert status.generation == 1
    assert (ended.status, ended.generation, ended.data) == (Status.SUCCEEDED, 1, {"x": 3})


def _exists(handle: Any) -> bool:
    try:
        handle.status()
    except ApiError:
        return False
    return True


def _ended(handle: Any) -> bool:
    try:
        return bool(handle.status().ended)
    except Exception:
        return False


def test_a_subscription_deleted_under_the_client_is_made_again(client: Client) -> None:
    client.listen()
    subscription = client.subscription()
    handle = client.start("waits", {})
    token = token_of(client, handle.flow_id, "approval")
    future = client.register(handle)
    try:
        assert subscription.path is not None
        pubsub_v1.SubscriberClient().delete_subscription(subscription=subscription.path)
        assert poll_until(lambda: subscription.epoch >= 2, timeout_s=30)
        client.complete_callback(token, output={"after": "re-creation"})
        assert future.result(timeout=30).data == {"after": "re-creation"}
    finally:
        client.release(handle)
