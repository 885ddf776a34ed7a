"""How the client reaches the api: HTTP(S) with an ID token from Application Default
Credentials, as the CLI's operator commands do (``relayflow.cli.api``, whose errors these are).

Reads, cancels, retries and callback completions go through the api, not to Firestore: the
caller acts with their verified identity and role (recorded on each action), sees only their
tenants, and needs no Firestore access. Where the api is: ``RELAYFLOW_API_URL`` (the local
stack's env file sets it) or ``Client(api_url=…)``.

Tokens, in this order: ``RELAYFLOW_API_TOKEN`` if set (sent as it is); none for a plain-http
api on this machine (the local stack's, open to loopback); else an ID token for the api's URL
from ADC (a service account's: a key, the metadata server on Cloud Run/GCE/GKE, or an
impersonated one), refreshed before it expires; and for a person's ADC (``gcloud auth
application-default login``), whose credentials cannot mint a token for another audience, the
ID token of the login itself, fresh (the api admits it when its OAuth client is one of
``RELAYFLOW_API_AUDIENCES``, for ``RELAYFLOW_API_AUDIENCE_MAX_AGE_S``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from typing import Any
from urllib import parse

import google.auth
import google.auth.transport.requests
from google.auth import exceptions as auth_exceptions
from google.oauth2 import id_token

from relayflow.cli.api import (
    API_TOKEN_ENV,
    API_URL_ENV,
    ApiError,
    ApiUnreachable,
    query_string,
    quoted,
)

__all__ = ["ApiError", "ApiUnreachable", "TokenSource", "Transport", "quoted"]
TIMEOUT_S = 60.0
# A person's login token is refreshed this often: the api admits such tokens only while
# younger than its audience max age (300 s by default).
USER_TOKEN_MAX_AGE_S = 240.0
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class TokenSource:
    """The bearer token for each call (None: send none)."""

    def __init__(self, audience: str, *, fixed: str | None = None) -> None:
        self._audience = audience
        self._fixed = fixed
        self._lock = threading.Lock()
        self._credentials: Any = None
        self._user: Any = None
        self._user_at = 0.0
        url = parse.urlsplit(audience)
        self._none = fixed is None and url.scheme == "http" and url.hostname in _LOOPBACK

    def token(self) -> str | None:
        if self._fixed is not None:
            return self._fixed
        if self._none:
            return None
        with self._lock:
            return self._from_adc()

    def _from_adc(self) -> str:
        request = google.auth.transport.requests.Request()
        if self._user is None:
            try:
                if self._credentials is None:
                    self._credentials = id_token.fetch_id_token_credentials(  # type: ignore[no-untyped-call]
                        self._audience, request=request
                    )
                if not self._credentials.valid:
                    self._credentials.refresh(request)
                return str(self._credentials.token)
            except auth_exceptions.DefaultCredentialsError:
                self._user, _ = google.auth.default()  # a person's login: its own ID token
        if getattr(self._user, "id_token", None) is None or (
            time.monotonic() - self._user_at > USER_TOKEN_MAX_AGE_S
        ):
            self._user.refresh(request)
            self._user_at = time.monotonic()
        token = getattr(self._user, "id_token", None)
        if not token:
            raise ApiUnreachable(
                "Application Default Credentials give no ID token for the api: use a service "
                f"account's, or set {API_TOKEN_ENV}"
            )
        return str(token)


class Transport:
    """JSON calls to the api at ``base_url``. One connection per call: calls are rare next
    to waits (which do not call the api at all when the results subscription runs)."""

    def __init__(self, base_url: str, tokens: TokenSource) -> None:
        url = parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ApiUnreachable(f"{base_url!r} is not an http(s) URL of the api")
        self.base_url = base_url.rstrip("/")
        self._url = url
        self._tokens = tokens

    @classmethod
    def from_env(cls, environ: Mapping[str, str], api_url: str | None = None) -> Transport:
        url = (api_url or environ.get(API_URL_ENV) or "").rstrip("/")
        if not url:
            raise ApiUnreachable(
                f"{API_URL_ENV} is not set: pass Client(api_url=...) or source the local "
                "stack's env file (.relayflow/local/env)"
            )
        return cls(url, TokenSource(url, fixed=environ.get(API_TOKEN_ENV) or None))

    def get(
        self, path: str, query: Mapping[str, Any] | None = None, *, timeout_s: float = TIMEOUT_S
    ) -> dict[str, Any]:
        return self.call("GET", path + query_string(query), None, timeout_s=timeout_s)

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.call("POST", path, json.dumps(body).encode("utf-8"))

    def call(
        self, method: str, path: str, data: bytes | None, *, timeout_s: float = TIMEOUT_S
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        token = self._tokens.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # http.client, as the CLI: no proxies (a developer's HTTP(S)_PROXY must not swallow
        # calls to 127.0.0.1).
        connection = (HTTPSConnection if self._url.scheme == "https" else HTTPConnection)(
            self._url.hostname or "", self._url.port, timeout=timeout_s
        )
        try:
            connection.request(method, self._url.path + path, body=data, headers=headers)
            response = connection.getresponse()
            body = response.read()
        except (OSError, HTTPException) as exc:
            raise ApiUnreachable(f"the api at {self.base_url} is not answering ({exc})") from None
        finally:
            connection.close()
        found = _json(body)
        if response.status >= 400:
            raise _error(response.status, response.reason, found)
        return found


def _json(body: bytes) -> dict[str, Any]:
    try:
        found = json.loads(body or b"{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _error(status: int, reason: str, body: Mapping[str, Any]) -> ApiError:
    """The api's Google-style error (``{"error": {"status", "message"}}``), or the HTTP one;
    the same errors as the CLI's."""
    detail = body.get("error")
    if isinstance(detail, Mapping) and "status" in detail and "message" in detail:
        return ApiError(status, str(detail["status"]), str(detail["message"]))
    return ApiError(status, "HTTP", reason)
