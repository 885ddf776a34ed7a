"""Calling external HTTP APIs, with every failure classified at the edge (invariant 7).

Timeouts, connection errors, 408, 429 and 5xx are retryable (429/503 carry Retry-After); other
4xx are permanent. A handler never inspects a status code itself.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import requests

from relayflow.core.errors import PermanentError, RetryableError

# 423 Locked and 425 Too Early say "not now", not "never".
RETRYABLE_STATUS = frozenset({408, 423, 425, 429, 500, 502, 503, 504})


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: either a number of seconds or an HTTP date (then relative)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:  # "inf" parses too, and no schedule can be that far ahead
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000" in RFC 5322 means UTC, but parses as naive
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_code(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP_{response.status_code}"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return str(error["code"])
    return f"HTTP_{response.status_code}"


def raise_for_response(response: requests.Response) -> None:
    """Raise the classified error for a non-2xx response."""
    if response.ok:
        return
    code = _error_code(response)
    message = f"{response.request.method} {response.url} -> {response.status_code} {code}"
    if response.status_code in RETRYABLE_STATUS:
        wait = retry_after_s(response.headers.get("Retry-After"))
        raise RetryableError(message, code=code, retry_after_s=wait)
    raise PermanentError(message, code=code)


def call_json(
    session: requests.Session, method: str, url: str, *, timeout_s: float, **kwargs: Any
) -> Any:
    """Send a request and return its JSON body, raising a classified error otherwise."""
    try:
        response = session.request(method, url, timeout=timeout_s, **kwargs)
    except (requests.Timeout, requests.ConnectionError) as exc:
        raise RetryableError(f"{method} {url}: {type(exc).__name__}", code="UNAVAILABLE") from exc
    raise_for_response(response)
    if response.status_code == 204 or not response.content.strip():
        return {}  # success with nothing to say (a DELETE, say): not a broken response
    try:
        return response.json()
    except ValueError:
        raise RetryableError(f"{method} {url}: response is not JSON", code="BAD_RESPONSE") from None
