"""The CLI's client of the operator api: what ``status``, ``list``, ``cancel``, ``retry``,
``rejected`` and ``dead-letters`` call.

Going through the api means the CLI sees what the console sees and acts with the caller's
verified identity and role, recorded on each action. Standard library only: these commands
must start in milliseconds, so their time goes to the api and Firestore, not to imports.

``RELAYFLOW_API_URL`` says where the api is (the local stack's env file sets it; in the cloud,
the environment's ``api_proxy_command`` — ``gcloud run services proxy api --port 8080`` with a
token minted for the api's URL — and ``http://127.0.0.1:8080``); ``RELAYFLOW_API_TOKEN``, if
set, is sent as the bearer token (the proxy adds its own).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from typing import Any
from urllib import parse

API_URL_ENV = "RELAYFLOW_API_URL"
API_TOKEN_ENV = "RELAYFLOW_API_TOKEN"
TIMEOUT_S = 60.0


class ApiUnreachable(Exception):
    """Raised when nothing answers at the api's URL (or RELAYFLOW_API_URL is not set)."""


class ApiError(Exception):
    """Raised when the api refuses a call; ``message`` is its own explanation."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Api:
    """Calls the api at ``base_url``; ``last_call_s`` is how long the last call took."""

    base_url: str
    token: str | None = None
    last_call_s: float = field(default=0.0, compare=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, hint: str) -> Api:
        """The api the environment names; ApiUnreachable (saying ``hint``) if it names none."""
        url = (environ.get(API_URL_ENV) or "").rstrip("/")
        if not url:
            raise ApiUnreachable(f"{API_URL_ENV} is not set: {hint}")
        if parse.urlsplit(url).scheme not in ("http", "https"):
            raise ApiUnreachable(f"{API_URL_ENV}={url!r} is not an http(s) URL")
        return cls(url, environ.get(API_TOKEN_ENV) or None)

    def get(self, path: str, query: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self._call("GET", path + query_string(query, unset=(None, "", False)), None)

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, json.dumps(body).encode("utf-8"))

    def _call(self, method: str, path: str, data: bytes | None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        # http.client, not urllib.request: a third of the import time, and no proxies (a
        # developer's HTTP(S)_PROXY must not swallow calls to 127.0.0.1, and the cloud api is
        # reached through `gcloud run services proxy` on 127.0.0.1 too).
        url = parse.urlsplit(self.base_url)
        connection = (HTTPSConnection if url.scheme == "https" else HTTPConnection)(
            url.hostname or "", url.port, timeout=TIMEOUT_S
        )
        began = time.perf_counter()
        try:
            connection.request(method, url.path + path, body=data, headers=headers)
            response = connection.getresponse()
            body = response.read()
        except (OSError, HTTPException) as exc:
            raise ApiUnreachable(f"the api at {self.base_url} is not answering ({exc})") from None
        finally:
            connection.close()
            self.last_call_s = time.perf_counter() - began
        if response.status >= 400:
            raise _api_error(response.status, response.reason, body)
        found: dict[str, Any] = json.loads(body)
        return found


def query_string(query: Mapping[str, Any] | None, *, unset: tuple[Any, ...] = (None, "")) -> str:
    """``?name=value&…`` of ``query`` (empty: ''), leaving out the ``unset`` values; a list is
    the parameter repeated (``label=a=1&label=b=2``)."""
    shown: dict[str, Any] = {}
    for name, value in (query or {}).items():
        if isinstance(value, list | tuple):
            if value:
                shown[name] = [str(v) for v in value]
        elif value not in unset:
            shown[name] = str(value)
    return f"?{parse.urlencode(shown, doseq=True)}" if shown else ""


def quoted(segment: str) -> str:
    """A path segment, escaped (ids are checked, but never trusted to be URL-safe)."""
    return parse.quote(segment, safe="")


def _api_error(status: int, reason: str, body: bytes) -> ApiError:
    """The api's Google-style error (``{"error": {"status", "message"}}``), or the HTTP one."""
    try:
        detail = json.loads(body or b"{}")["error"]
        return ApiError(status, str(detail["status"]), str(detail["message"]))
    except (ValueError, KeyError, TypeError):
        return ApiError(status, "HTTP", reason)
