"""Verifying the OIDC tokens Cloud Tasks (and Cloud Scheduler) attach to their requests.

In the cloud the certs are Google's; locally they are the Cloud Tasks emulator's, served in the
same shape, so the same google-auth call verifies both.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import google.auth.transport.requests
from google.auth import crypt
from google.auth import exceptions as auth_exceptions
from google.auth.transport import Request, Response
from google.oauth2 import id_token

from relayflow.core.errors import RelayflowError

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
# How far the signer's clock may be off ours (iat in our future, exp just past).
CLOCK_SKEW_S = 10.0
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


class KeyedVerify:
    """google-auth's ``verify_token`` checks, with each certs document's keys parsed once.

    ``verify_token`` turns every certificate into a key on every call, which was a tenth of a
    poll request's CPU. This caches the keys — never a verdict: every token still has its
    signature, algorithm, times and audience checked. The keys are re-parsed whenever the
    request returns a new certs response (``CachingRequest`` refetches them every five
    minutes, so a rotation is seen). A JWK set, which Google's v1 certs URL does not serve,
    is left to ``verify_token``.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._parsed: dict[str, tuple[Response, dict[str, crypt.RSAVerifier]]] = {}
        self._lock = threading.Lock()

    def __call__(
        self, token: str, request: Request, audience: Audience, certs_url: str
    ) -> Mapping[str, Any]:
        keys = self._keys(request, certs_url)
        if keys is None:
            return _google_verify(token, request, audience, certs_url)
        header, payload, signed, signature = _split(token)
        if header.get("alg") != "RS256":
            raise ValueError(f"token algorithm {header.get('alg')!r} is not RS256")
        key = keys.get(str(header.get("kid")))
        if key is None:
            raise ValueError(f"token key id {header.get('kid')!r} is not among the certs")
        if not key.verify(signed, signature):
            raise ValueError("token signature does not verify")
        _check_times(payload, self._clock())
        allowed = [audience] if isinstance(audience, str) else audience
        if payload.get("aud") not in allowed:
            raise ValueError(f"token has wrong audience {payload.get('aud')!r}")
        return payload

    def _keys(self, request: Request, certs_url: str) -> dict[str, crypt.RSAVerifier] | None:
        response = request(certs_url, method="GET")
        if response.status != 200:
            raise auth_exceptions.TransportError(  # type: ignore[no-untyped-call]
                f"could not fetch certificates at {certs_url}"
            )
        with self._lock:
            cached = self._parsed.get(certs_url)
        if cached is not None and cached[0] is response:
            return cached[1]
        certs = json.loads(response.data)
        if not isinstance(certs, dict) or "keys" in certs:
            return None
        keys = {str(kid): _key(pem) for kid, pem in certs.items()}
        with self._lock:
            self._parsed[certs_url] = (response, keys)
        return keys


def _key(pem: str) -> crypt.RSAVerifier:
    return crypt.RSAVerifier.from_string(pem)  # type: ignore[no-untyped-call,no-any-return]


def _split(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """A JWT's header, payload, signed part and signature (nothing checked yet)."""
    parts = token.encode("ascii", "replace").split(b".")
    if len(parts) != 3:
        raise ValueError("token is not a JWT: it needs three dot-separated parts")
    try:
        header, payload = (json.loads(_b64(part)) for part in parts[:2])
        signature = _b64(parts[2])
    except (ValueError, binascii.Error) as exc:
        raise ValueError(f"token is not a JWT: {exc}") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise ValueError("token is not a JWT: header and payload must be JSON objects")
    return header, payload, parts[0] + b"." + parts[1], signature


def _b64(part: bytes) -> bytes:
    return base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4))


def _check_times(payload: Mapping[str, Any], now: float) -> None:
    issued, expires = payload.get("iat"), payload.get("exp")
    if not isinstance(issued, int | float) or not isinstance(expires, int | float):
        raise ValueError("token lacks a numeric iat or exp claim")
    if now < issued - CLOCK_SKEW_S:
        raise ValueError(f"token used too early, {now:.0f} < {issued}")
    if now > expires + CLOCK_SKEW_S:
        raise ValueError(f"token expired, {expires} < {now:.0f}")


class TokenVerifier:
    """Checks ``Authorization: Bearer <OIDC token>``: signature, audience, issuer, caller."""

    def __init__(
        self,
        *,
        audience: str | Sequence[str],
        allowed_emails: Iterable[str],
        certs_url: str | None = None,
        request: Request | None = None,
        verify: Verify | None = None,
    ) -> None:
        self._audience = audience if isinstance(audience, str) else list(audience)
        self._allowed = frozenset(allowed_emails)
        self._certs_url = certs_url or GOOGLE_CERTS_URL
        self._request = request or CachingRequest(google.auth.transport.requests.Request())
        self._verify = verify or KeyedVerify()

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
