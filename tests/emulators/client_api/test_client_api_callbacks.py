"""Activation callbacks: when they are sent, what they carry, retries, and the modes.

The dispatcher is driven by calling ``tick(now)`` with the fake clock's time: no test sleeps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from client_api_fakes import FakeClock, FakePost, FakeSleep
from flask import Flask
from flask.testing import FlaskClient

from relayflow.emulators.client_api.app import callback_dispatcher, create_app

DELAY_S = 2.0
URL = "http://127.0.0.1:9/callbacks?x=1"
TOKEN = "f-1.0123456789abcdef0123456789abcdef01234567"
KEY_1 = {"Idempotency-Key": "k1"}


@pytest.fixture
def posted() -> FakePost:
    return FakePost()


@pytest.fixture
def app(clock: FakeClock, posted: FakePost) -> Flask:
    return create_app(clock=clock, activation_delay_s=DELAY_S, sleep=FakeSleep(), post=posted)


@pytest.fixture
def api(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def tick(app: Flask, clock: FakeClock) -> Callable[[], int]:
    """Run the dispatcher once at the fake clock's time."""
    return lambda: callback_dispatcher(app).tick(clock())


def register(
    api: FlaskClient, resource: str = "acme", key: str = "k1", url: str = URL, **more: Any
) -> Any:
    return api.post(
        "/registrations",
        json={"resource": resource, "callback_url": url, **more},
        headers={"Idempotency-Key": key},
    )


def stats(api: FlaskClient) -> Any:
    return api.get("/stats").get_json()


def configure(api: FlaskClient, **config: Any) -> None:
    assert api.post("/admin/config", json=config).status_code == 200


def test_on_time_callback_posts_to_the_url_as_given_once_active(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    registration = register(api).get_json()
    clock.advance(DELAY_S - 0.001)
    tick()
    assert posted.calls == []

    clock.advance(0.001)
    tick()
    tick()

    assert posted.calls == [
        (
            URL,
            {
                "registration_id": registration["id"],
                "resource": "acme",
                "status": "ACTIVE",
                "activated_at": "2025-06-15T15:06:42Z",  # START_EPOCH_S + DELAY_S
            },
        )
    ]
    assert (stats(api)["callbacks_sent"], stats(api)["callbacks_pending"]) == (1, 0)


def test_the_registration_shows_its_callback_url(api: FlaskClient) -> None:
    assert register(api).get_json()["callback_url"] == URL


def test_a_callback_token_goes_back_in_a_header_apart_from_the_url(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    shown = register(api, callback_token=TOKEN).get_json()
    assert TOKEN not in str(shown)  # a secret is not shown back
    clock.advance(DELAY_S)
    tick()
    ((url, body),) = posted.calls
    assert url == URL and TOKEN not in url and TOKEN not in str(body)
    assert posted.headers == [{"X-Relayflow-Callback-Token": TOKEN}]


def test_a_callback_without_a_token_sends_no_token_header(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    register(api)
    clock.advance(DELAY_S)
    tick()
    assert posted.headers == [{}]


@pytest.mark.parametrize("token", ["", "a b", "x" * 501, "tok\n"])
def test_a_callback_token_must_be_printable_and_bounded(api: FlaskClient, token: str) -> None:
    response = register(api, callback_token=token)
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "INVALID_ARGUMENT"


def test_a_callback_token_needs_a_callback_url(api: FlaskClient) -> None:
    response = api.post(
        "/registrations", json={"resource": "acme", "callback_token": TOKEN}, headers=KEY_1
    )
    assert response.status_code == 400
    assert "callback_token needs a callback_url" in response.get_json()["error"]["message"]


def test_a_failed_callback_is_logged_without_its_token(
    api: FlaskClient,
    clock: FakeClock,
    posted: FakePost,
    tick: Callable[[], int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    posted.answers.extend([ConnectionRefusedError("down")] + [500] * 3)
    register(api, callback_token=TOKEN)
    clock.advance(DELAY_S)
    for _ in range(4):
        tick()
        clock.advance(10)
    assert len(posted.calls) == 4 and "given up" in caplog.text
    assert TOKEN not in caplog.text


def test_late_callback_comes_callback_late_s_after_activation(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    configure(api, callback_modes={"acme": "late"}, callback_late_s=30)
    register(api)

    clock.advance(DELAY_S + 29.9)
    tick()
    assert posted.calls == []
    clock.advance(0.1)
    tick()

    assert len(posted.calls) == 1


def test_twice_sends_on_time_and_again_late(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    configure(api, callback_modes={"acme": "twice"})  # late by the default 5 s
    register(api)

    clock.advance(DELAY_S)
    tick()
    on_time = len(posted.calls)
    clock.advance(5)
    tick()

    assert (on_time, len(posted.calls)) == (1, 2)
    assert posted.calls[0] == posted.calls[1]
    assert stats(api)["callbacks_sent"] == 2


def test_never_sends_nothing(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    configure(api, callback_modes={"acme": "never"})
    register(api)

    clock.advance(3600)
    tick()

    assert posted.calls == []
    assert stats(api)["callbacks_pending"] == 0


def test_the_default_mode_applies_to_unlisted_resources(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    configure(api, callback_default_mode="never", callback_modes={"vip": "on_time"})
    register(api, resource="acme", key="a")
    register(api, resource="vip", key="b")

    clock.advance(DELAY_S)
    tick()

    assert [body["resource"] for _, body in posted.calls] == ["vip"]


def test_the_mode_is_fixed_when_the_registration_is_created(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    register(api)
    configure(api, callback_modes={"acme": "never"})

    clock.advance(DELAY_S)
    tick()

    assert len(posted.calls) == 1


def test_no_callback_without_a_url_or_without_activation(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    api.post("/registrations", json={"resource": "acme"}, headers={"Idempotency-Key": "a"})
    configure(api, resource_delays={"stuck": None})
    register(api, resource="stuck", key="b")

    clock.advance(3600)
    tick()

    assert posted.calls == []


def test_cancelled_before_activation_sends_nothing(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    registration_id = register(api).get_json()["id"]
    clock.advance(1)
    api.delete(f"/registrations/{registration_id}")

    clock.advance(DELAY_S)
    tick()

    assert posted.calls == []
    assert stats(api)["callbacks_pending"] == 0


def test_a_late_callback_still_comes_after_a_cancel_that_followed_activation(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    configure(api, callback_modes={"acme": "late"})
    registration_id = register(api).get_json()["id"]
    clock.advance(DELAY_S + 1)
    api.delete(f"/registrations/{registration_id}")

    clock.advance(5)
    tick()

    # It did become ACTIVE: the (late) report of that is what a callee must tolerate.
    assert [body["status"] for _, body in posted.calls] == ["ACTIVE"]


def test_a_failed_callback_is_retried_with_backoff(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    posted.answers.extend([ConnectionRefusedError("down"), 503, 200])
    register(api)
    clock.advance(DELAY_S)

    tries = []
    for step_s in (0.0, 0.49, 0.01, 0.99, 0.01):  # due again 0.5 s, then 1 s, after a failure
        clock.advance(step_s)
        tick()
        tries.append(len(posted.calls))

    assert tries == [1, 1, 2, 2, 3]
    assert (stats(api)["callbacks_sent"], stats(api)["callbacks_failed"]) == (1, 0)


def test_a_callback_is_given_up_after_four_tries(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    posted.answers.extend([500] * 10)
    register(api)
    clock.advance(DELAY_S)

    for _ in range(10):
        tick()
        clock.advance(10)

    assert len(posted.calls) == 4
    assert (stats(api)["callbacks_sent"], stats(api)["callbacks_failed"]) == (0, 1)
    assert stats(api)["callbacks_pending"] == 0


def test_callback_url_is_part_of_the_idempotent_body(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    first = register(api).get_json()

    replay = register(api)
    other_url = register(api, url="http://127.0.0.1:9/other")
    other_token = register(api, callback_token=TOKEN)
    no_url = api.post(
        "/registrations", json={"resource": "acme"}, headers={"Idempotency-Key": "k1"}
    )
    clock.advance(DELAY_S)
    tick()

    assert (replay.status_code, replay.get_json()["id"]) == (200, first["id"])
    assert other_url.status_code == other_token.status_code == no_url.status_code == 409
    assert len(posted.calls) == 1  # a replay queues no second callback


@pytest.mark.parametrize("url", ["ftp://h/x", "/relative", "", "http://"])
def test_a_callback_url_must_be_absolute_http(api: FlaskClient, url: str) -> None:
    response = register(api, url=url)

    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "INVALID_ARGUMENT"


def test_reset_drops_pending_callbacks(
    api: FlaskClient, clock: FakeClock, posted: FakePost, tick: Callable[[], int]
) -> None:
    register(api)

    api.post("/admin/reset")
    clock.advance(DELAY_S)
    tick()

    assert posted.calls == []
    assert stats(api)["callbacks_pending"] == 0


def test_the_background_thread_delivers_due_callbacks() -> None:
    posted = FakePost()
    app = create_app(activation_delay_s=0, post=posted)  # the real clock
    dispatcher = callback_dispatcher(app)
    dispatcher.start()
    try:
        register(app.test_client())
        deadline = time.monotonic() + 5
        while not posted.calls and time.monotonic() < deadline:
            time.sleep(0.01)  # polling what the thread does, not waiting out a delay
    finally:
        dispatcher.stop()

    assert [url for url, _ in posted.calls] == [URL]
