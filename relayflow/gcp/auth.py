"""Verifying the OIDC tokens Cloud Tasks (and Cloud Scheduler) attach to their requests.

In the cloud the certs are Google's; locally they are the Cloud Tasks emulator's, served in the
same shape, so the same google-auth call verifies both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import google.auth.transport.requests
from google.auth import exceptions as auth_exceptions
from google.auth.transport import Request, Response
from google.oauth2 import id_token

from relayflow.core.errors import RelayflowError

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})


class Unauthorized(RelayflowError):
    """Raised when a request's bearer token is missing, invalid, or not from an allowed caller."""


class NotAllowed(Unauthorized):
    """Raised when a valid token names a caller who is not on the service's allowlist."""


class CachingRequest(Request):
    """A google-auth transport that remembers GET responses (the certs) for ``ttl_s``.

    verify_token fetches the certs on every call; a service verifying every task must not.
    """

    def __init__(self, inner: Request, *, ttl_s: float = 300.0) -> None:
        self._inner = inner
        self._ttl_s = ttl_s
        self._cache: dict[str, tuple[float, Response]] = {}
        self._lock = threading.Lock()

    def __call__(
        self,
        url: Any,
        method: Any = "GET",
        body: Any = None,
        headers: Any = None,
        timeout: Any = None,
        **kwargs: Any,
    ) -> Any:
        forward = {"body": body, "headers": headers, "timeout": timeout, **kwargs}
        if method != "GET":
            return self._inner(url, method=method, **forward)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(url)
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        response: Response = self._inner(url, method=method, **forward)
        if response.status == 200:
            with self._lock:
                self._cache[url] = (now, response)
        return response


Audience = str | list[str]
Verify = Callable[[str, Request, Audience, str], Mapping[str, Any]]


def _google_verify(
    token: str, request: Request, audience: Audience, certs_url: str
) -> Mapping[str, Any]:
    # google-auth checks ``aud`` against one audience or any of a list.
    return id_token.verify_token(token, request, audience=audience, certs_url=certs_url)


class TokenVerifier:
    """Checks ``Authorization: Bearer <OIDC token>``: signature, audience, issuer, caller."""

    def __init__(
        self,
        *,
        audience: str | Sequence[str],
        allowed_emails: Iterable[str],
        certs_url: str | None = None,
        request: Request | None = None,
        verify: Verify = _google_verify,
    ) -> None:
        self._audience = audience if isinstance(audience, str) else list(audience)
        self._allowed = frozenset(allowed_emails)
        self._certs_url = certs_url or GOOGLE_CERTS_URL
        self._request = request or CachingRequest(google.auth.transport.requests.Request())
        self._verify = verify

    def verify(self, authorization: str | None) -> str:
        """The caller's email, or Unauthorized saying what is wrong."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("missing 'Authorization: Bearer <token>' header")
        try:
            claims = self._verify(token, self._request, self._audience, self._certs_url)
        except (ValueError, auth_exceptions.GoogleAuthError) as exc:
            raise Unauthorized(f"invalid token: {exc}") from None
        return self._check_claims(claims)

    def _check_claims(self, claims: Mapping[str, Any]) -> str:
        if claims.get("iss") not in ISSUERS:
            raise Unauthorized(f"token issuer {claims.get('iss')!r} is not Google")
        email = str(claims.get("email", ""))
        if not claims.get("email_verified", False):
            raise Unauthorized(f"token email {email!r} is not verified")
        if email not in self._allowed:
            raise NotAllowed(f"caller {email!r} may not call this service")
        return email
