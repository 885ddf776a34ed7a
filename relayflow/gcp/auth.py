"""Verifying the OIDC tokens Cloud Tasks (and Cloud Scheduler) attach to their requests.

In the cloud the certs are Google's; locally they are the Cloud Tasks emulator's, served in the
same shape, so the same google-auth call verifies both.

A token that fails a check is ``Unauthorized`` (401: the caller must fix it). Certs that cannot
be had — the certs URL unreachable, answering 5xx, or answering something that is not certs —
say nothing about the token: that is ``VerifierUnavailable`` (503, retryable), and nothing
from such an answer is cached.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeGuard

import google.auth.transport.requests
from google.auth import crypt
from google.auth import exceptions as auth_exceptions
from google.auth.transport import Request, Response
from google.oauth2 import id_token

from relayflow.core.errors import NotAllowed, Unauthorized, VerifierUnavailable

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
# How far the signer's clock may be off ours (iat in our future, exp just past).
CLOCK_SKEW_S = 10.0
ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})


class CachingRequest(Request):
    """A google-auth transport that remembers GET responses (the certs) for ``ttl_s``.

    verify_token fetches the certs on every call; a service verifying every task must not.
    Only a 200 whose body is a certs document is remembered: an error page, a truncated or
    empty answer is passed on once (and refused by the verifier), then asked for again.
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
        if response.status == 200 and _parse_certs(response.data) is not None:
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
            checked = _google_verify(token, request, audience, certs_url)
            _check_times(checked, self._clock())  # google-auth lets a NaN exp through
            return checked
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
        """The certs' keys (None for a JWK set); VerifierUnavailable if there are none."""
        try:
            response = request(certs_url, method="GET")
        except (auth_exceptions.TransportError, OSError) as exc:
            raise VerifierUnavailable(f"cannot fetch the certs at {certs_url}: {exc}") from None
        if response.status != 200:
            raise VerifierUnavailable(
                f"cannot fetch the certs at {certs_url}: it answered {response.status}"
            )
        with self._lock:
            cached = self._parsed.get(certs_url)
        if cached is not None and cached[0] is response:
            return cached[1]
        certs = _parse_certs(response.data)
        if certs is None:
            raise VerifierUnavailable(f"the certs at {certs_url} answered something not certs")
        if "keys" in certs:
            return None
        try:
            keys = {str(kid): _key(pem) for kid, pem in certs.items()}
        except ValueError as exc:
            raise VerifierUnavailable(f"the certs at {certs_url} do not parse: {exc}") from None
        with self._lock:
            self._parsed[certs_url] = (response, keys)
        return keys


def _parse_certs(data: bytes) -> dict[str, Any] | None:
    """A certs document — ``{kid: PEM certificate}`` (at least one) or a JWK set
    ``{"keys": [JWK, …]}`` (at least one) — or None for anything else."""
    try:
        certs = json.loads(data, parse_constant=_no_constant)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(certs, dict) or not certs:
        return None
    if "keys" in certs:
        jwks = certs["keys"]
        ok = isinstance(jwks, list) and bool(jwks) and all(isinstance(k, dict) for k in jwks)
        return certs if ok else None
    pems = all(isinstance(pem, str) and "-----BEGIN " in pem for pem in certs.values())
    return certs if pems else None


def _key(pem: str) -> crypt.RSAVerifier:
    return crypt.RSAVerifier.from_string(pem)  # type: ignore[no-untyped-call,no-any-return]


def _no_constant(name: str) -> Any:
    """``json.loads`` accepts NaN and ±Infinity, which JSON (RFC 8259) does not."""
    raise ValueError(f"{name} is not JSON")


def _split(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """A JWT's header, payload, signed part and signature (nothing checked yet)."""
    parts = token.encode("ascii", "replace").split(b".")
    if len(parts) != 3:
        raise ValueError("token is not a JWT: it needs three dot-separated parts")
    try:
        header, payload = (
            json.loads(_b64(part), parse_constant=_no_constant) for part in parts[:2]
        )
        signature = _b64(parts[2])
    except RecursionError:  # json.loads, on JSON nested deeper than the interpreter's limit
        raise ValueError("token is not a JWT: its JSON is nested too deep") from None
    except (ValueError, binascii.Error) as exc:
        raise ValueError(f"token is not a JWT: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise ValueError("token is not a JWT: header and payload must be JSON objects")
    return header, payload, parts[0] + b"." + parts[1], signature


def _b64(part: bytes) -> bytes:
    return base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4))


def _finite(value: object) -> TypeGuard[float]:
    """A JSON number that is a time: not a bool, not NaN or ±Infinity (which compare false
    with everything, so a token would never expire)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_times(payload: Mapping[str, Any], now: float) -> None:
    issued, expires = payload.get("iat"), payload.get("exp")
    if not _finite(issued) or not _finite(expires):
        raise ValueError("token lacks a finite numeric iat or exp claim")
    if now < issued - CLOCK_SKEW_S:
        raise ValueError(f"token used too early, {now:.0f} < {issued}")
    if now > expires + CLOCK_SKEW_S:
        raise ValueError(f"token expired, {expires} < {now:.0f}")


class TokenVerifier:
    """Checks ``Authorization: Bearer <OIDC token>``: signature, audience, issuer, caller.

    ``audience_max_age_s`` bounds the age of tokens for some audiences: one that is not a
    service's URL but a client's that mints tokens for any service (gcloud's OAuth client: a
    person's every gcloud ID token has it, whatever it was for), so that a token sent to
    another service can be replayed here only while it is that young.
    """

    def __init__(
        self,
        *,
        audience: str | Sequence[str],
        allowed_emails: Iterable[str],
        certs_url: str | None = None,
        request: Request | None = None,
        verify: Verify | None = None,
        audience_max_age_s: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._audience = audience if isinstance(audience, str) else list(audience)
        self._allowed = frozenset(allowed_emails)
        self._certs_url = certs_url or GOOGLE_CERTS_URL
        self._request = request or CachingRequest(google.auth.transport.requests.Request())
        self._verify = verify or KeyedVerify()
        self._max_age_s = dict(audience_max_age_s or {})
        self._clock = clock

    def verify(self, authorization: str | None) -> str:
        """The caller's email; Unauthorized saying what is wrong with the token, or
        VerifierUnavailable when no token can be checked now."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("missing 'Authorization: Bearer <token>' header")
        try:
            claims = self._verify(token, self._request, self._audience, self._certs_url)
        except (auth_exceptions.TransportError, OSError) as exc:
            # google-auth's own fetch of the certs (a JWK set) failed: not the token's fault.
            raise VerifierUnavailable(f"cannot fetch the certs: {exc}") from None
        except (ValueError, auth_exceptions.GoogleAuthError) as exc:
            raise Unauthorized(f"invalid token: {exc}") from None
        except RecursionError:  # google-auth's own parse of a token nested too deep
            raise Unauthorized("invalid token: its JSON is nested too deep to be a JWT") from None
        self._check_age(claims)
        return self._check_claims(claims)

    def _check_age(self, claims: Mapping[str, Any]) -> None:
        audience = claims.get("aud")
        limit = self._max_age_s.get(audience) if isinstance(audience, str) else None
        if limit is None:
            return
        issued = claims.get("iat")
        age_s = self._clock() - issued if _finite(issued) else math.inf
        if age_s > limit:
            raise Unauthorized(
                f"token for audience {audience!r} was issued {age_s:.0f} s ago; tokens for it "
                f"are accepted for {limit:.0f} s only: mint a fresh one, or one for this "
                "service's own URL"
            )

    def _check_claims(self, claims: Mapping[str, Any]) -> str:
        if claims.get("iss") not in ISSUERS:
            raise Unauthorized(f"token issuer {claims.get('iss')!r} is not Google")
        email = str(claims.get("email", ""))
        # Only the JSON boolean: the string "false" is truthy.
        if claims.get("email_verified") is not True:
            raise Unauthorized(f"token email {email!r} is not verified")
        if email not in self._allowed:
            raise NotAllowed(f"caller {email!r} may not call this service")
        return email
