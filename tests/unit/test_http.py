"""relayflow.http: every outcome of an external call is classified at the edge.

Responses come from a local transport adapter mounted on a real ``requests.Session``; nothing
leaves the process.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
import requests
from requests.adapters import BaseAdapter, HTTPAdapter
from urllib3 import HTTPResponse

from relayflow.core.errors import PermanentError, RetryableError
from relayflow.http import call_json, raise_for_response, retry_after_s

URL = "http://client-api.test/registrations"


class StubAdapter(BaseAdapter):
    """Answers every request with one canned response (or raises), and records what it got."""

    def __init__(self, answer: Callable[[requests.PreparedRequest], HTTPResponse]) -> None:
        super().__init__()
        self._answer = answer
        self.sent: list[tuple[requests.PreparedRequest, Any]] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append((request, kwargs.get("timeout")))
        return HTTPAdapter().build_response(request, self._answer(request))

    def close(self) -> None:
        pass


def raw(status: int, body: Any = None, headers: dict[str, str] | None = None) -> HTTPResponse:
    content = (
        b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    )
    return HTTPResponse(
        body=io.BytesIO(content),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
        preload_content=False,
    )


def session_answering(
    answer: Callable[[requests.PreparedRequest], HTTPResponse],
) -> requests.Session:
    session = requests.Session()
    session.mount("http://", StubAdapter(answer))
    return session


def response(
    status: int, body: Any = None, headers: dict[str, str] | None = None
) -> requests.Response:
    session = session_answering(lambda _: raw(status, body, headers))
    return session.post(URL, timeout=1)


def raising(exc: Exception) -> requests.Session:
    def answer(request: requests.PreparedRequest) -> HTTPResponse:
        raise exc

    return session_answering(answer)


def test_a_success_returns_the_json_body_and_passes_the_timeout() -> None:
    adapter = StubAdapter(lambda _: raw(201, {"id": "reg-1"}))
    session = requests.Session()
    session.mount("http://", adapter)
    body = call_json(session, "POST", URL, timeout_s=2.5, json={"resource": "acme-1"})
    assert body == {"id": "reg-1"}
    sent, timeout = adapter.sent[0]
    assert (sent.method, timeout, sent.body) == ("POST", 2.5, b'{"resource": "acme-1"}')


def test_raise_for_lets_a_2xx_through() -> None:
    raise_for_response(response(204))


@pytest.mark.parametrize("status", [503, 429])
def test_retry_after_in_seconds_is_carried_on_the_retryable_error(status: int) -> None:
    with pytest.raises(RetryableError) as info:
        raise_for_response(response(status, {"error": {"code": "BUSY"}}, {"Retry-After": "17"}))
    assert info.value.retry_after_s == 17.0
    assert info.value.code == "BUSY"
    assert f"POST {URL} -> {status} BUSY" == info.value.message


@pytest.mark.parametrize("status", [503, 429])
def test_retry_after_as_an_http_date_becomes_seconds_from_now(status: int) -> None:
    when = datetime.now(UTC) + timedelta(seconds=120)
    header = format_datetime(when, usegmt=True)
    with pytest.raises(RetryableError) as info:
        raise_for_response(response(status, headers={"Retry-After": header}))
    assert info.value.retry_after_s is not None
    assert 110.0 <= info.value.retry_after_s <= 120.0


def test_a_retryable_response_without_retry_after_has_none() -> None:
    with pytest.raises(RetryableError) as info:
        raise_for_response(response(503))
    assert info.value.retry_after_s is None


@pytest.mark.parametrize("status", [500, 502, 504, 408])
def test_server_errors_and_request_timeout_are_retryable(status: int) -> None:
    with pytest.raises(RetryableError) as info:
        raise_for_response(response(status, b"<html>oops</html>"))
    assert info.value.code == f"HTTP_{status}"


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "INVALID_RESOURCE"), (404, "NOT_FOUND"), (409, "CONFLICT"), (422, "UNPROCESSABLE")],
)
def test_client_errors_are_permanent_with_the_json_error_code(status: int, code: str) -> None:
    with pytest.raises(PermanentError) as info:
        raise_for_response(response(status, {"error": {"code": code, "message": "no"}}))
    assert not isinstance(info.value, RetryableError)
    assert info.value.code == code


@pytest.mark.parametrize(
    "body", [b"not json", {"error": "flat string"}, [1, 2], {"error": {"code": 7}}]
)
def test_a_client_error_without_a_json_error_code_falls_back_to_the_status(body: Any) -> None:
    with pytest.raises(PermanentError) as info:
        raise_for_response(response(400, body))
    assert info.value.code == "HTTP_400"


@pytest.mark.parametrize(
    "exc",
    [
        requests.ConnectTimeout("slow"),
        requests.ReadTimeout("slow"),
        requests.ConnectionError("refused"),
    ],
)
def test_timeouts_and_connection_errors_are_retryable(exc: Exception) -> None:
    with pytest.raises(RetryableError) as info:
        call_json(raising(exc), "GET", URL, timeout_s=1.0)
    assert info.value.code == "UNAVAILABLE"
    assert type(exc).__name__ in info.value.message


def test_a_2xx_that_is_not_json_is_retryable() -> None:
    session = session_answering(lambda _: raw(200, b"<html>proxy page</html>"))
    with pytest.raises(RetryableError) as info:
        call_json(session, "GET", URL, timeout_s=1.0)
    assert info.value.code == "BAD_RESPONSE"


def test_call_classifies_an_error_response() -> None:
    session = session_answering(lambda _: raw(409, {"error": {"code": "ALREADY_ACTIVE"}}))
    with pytest.raises(PermanentError) as info:
        call_json(session, "DELETE", URL, timeout_s=1.0)
    assert info.value.code == "ALREADY_ACTIVE"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None), ("0", 0.0), ("2.5", 2.5), ("-3", 0.0), ("soon", None)],
)
def test_retry_after_parses_seconds_and_ignores_nonsense(
    value: str | None, expected: float | None
) -> None:
    assert retry_after_s(value) == expected


def test_retry_after_a_date_in_the_past_is_zero() -> None:
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_retry_after_a_date_without_a_zone_is_read_as_utc() -> None:
    when = (datetime.now(UTC) + timedelta(seconds=60)).strftime("%a, %d %b %Y %H:%M:%S -0000")
    wait = retry_after_s(when)
    assert wait is not None and 50.0 <= wait <= 60.0


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e400"])
def test_retry_after_that_is_not_a_finite_number_is_ignored(value: str) -> None:
    assert retry_after_s(value) is None


@pytest.mark.parametrize("status", [204, 200])
def test_a_success_without_a_body_is_an_empty_result(status: int) -> None:
    session = session_answering(lambda _: raw(status, b""))
    assert call_json(session, "DELETE", URL, timeout_s=1) == {}


@pytest.mark.parametrize("status", [423, 425])
def test_locked_and_too_early_are_retryable(status: int) -> None:
    with pytest.raises(RetryableError):
        raise_for_response(response(status, {}))
