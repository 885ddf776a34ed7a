"""auth: who may call a service, decided from an injected token check; cached certs."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from google.auth import exceptions as auth_exceptions

from relayflow.gcp import auth
from relayflow.gcp.auth import (
    GOOGLE_CERTS_URL,
    CachingRequest,
    TokenVerifier,
    Unauthorized,
    VerifierUnavailable,
)

CALLER = "tasks-invoker@relayflow-dev.iam.gserviceaccount.com"
GOOD_CLAIMS = {"iss": "https://accounts.google.com", "email": CALLER, "email_verified": True}


@dataclass
class FakeVerify:
    """Stands in for google-auth's verify_token: returns claims or raises, records its calls."""

    claims: Mapping[str, Any] = field(default_factory=lambda: dict(GOOD_CLAIMS))
    error: Exception | None = None
    calls: list[tuple[str, Any, str, str]] = field(default_factory=list)

    def __call__(
        self, token: str, request: Any, audience: str, certs_url: str
    ) -> Mapping[str, Any]:
        self.calls.append((token, request, audience, certs_url))
        if self.error is not None:
            raise self.error
        return self.claims


@dataclass
class FakeResponse:
    status: int = 200
    data: bytes = b"{}"


@dataclass
class CountingTransport:
    """A google-auth transport that answers certs (numbered by the call) and counts what it
    was asked; ``body`` replaces the certs when set."""

    status: int = 200
    body: bytes | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, url: str, method: str = "GET", **kwargs: Any) -> FakeResponse:
        self.calls.append((url, method))
        pem = f"-----BEGIN CERTIFICATE-----\n{url} #{len(self.calls)}\n-----END CERTIFICATE-----"
        data = self.body if self.body is not None else json.dumps({"k1": pem}).encode()
        return FakeResponse(status=self.status, data=data)


def verifier(verify: FakeVerify, **kw: Any) -> TokenVerifier:
    return TokenVerifier(
        audience="https://worker.example.run.app",
        allowed_emails=[CALLER],
        request=CachingRequest(CountingTransport()),  # type: ignore[arg-type]
        verify=verify,
        **kw,
    )


def test_an_allowed_verified_google_caller_passes() -> None:
    # given a token whose claims are from Google, verified, and an allowed email
    verify = FakeVerify()
    # when the header is checked
    email = verifier(verify).verify("Bearer tok-123")
    # then the caller's email comes back, and the token was checked for our audience
    assert email == CALLER
    token, _, audience, certs_url = verify.calls[0]
    assert (token, audience, certs_url) == (
        "tok-123",
        "https://worker.example.run.app",
        GOOGLE_CERTS_URL,
    )


def test_the_scheme_is_case_insensitive_and_the_issuer_may_omit_https() -> None:
    verify = FakeVerify(claims={**GOOD_CLAIMS, "iss": "accounts.google.com"})
    assert verifier(verify).verify("bearer tok") == CALLER


def test_a_custom_certs_url_is_passed_to_the_token_check() -> None:
    verify = FakeVerify()
    verifier(verify, certs_url="http://localhost:8123/certs").verify("Bearer tok")
    assert verify.calls[0][3] == "http://localhost:8123/certs"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwdw==", "tok"])
def test_a_missing_or_non_bearer_header_is_unauthorized(header: str | None) -> None:
    verify = FakeVerify()
    with pytest.raises(Unauthorized, match=r"missing 'Authorization: Bearer <token>' header"):
        verifier(verify).verify(header)
    assert verify.calls == []


@pytest.mark.parametrize(
    "error",
    [
        ValueError("Token expired, 1700000000 < 1700000100"),
        auth_exceptions.InvalidValue("Wrong number of segments"),
    ],
)
def test_a_token_that_fails_verification_is_unauthorized_with_the_reason(error: Exception) -> None:
    with pytest.raises(Unauthorized, match=None) as info:
        verifier(FakeVerify(error=error)).verify("Bearer tok")
    assert str(info.value) == f"invalid token: {error}"


@pytest.mark.parametrize(
    "error",
    [auth_exceptions.TransportError("Could not fetch certificates"), ConnectionResetError()],
    ids=["transport-error", "connection-reset"],
)
def test_certs_that_cannot_be_fetched_are_unavailable_not_an_invalid_token(
    error: Exception,
) -> None:
    # given google-auth's own fetch of the certs fails (the JWK path), whatever the token
    with pytest.raises(VerifierUnavailable, match="cannot fetch the certs") as info:
        verifier(FakeVerify(error=error)).verify("Bearer tok")
    # then that is not a verdict on the token: no 401 for the caller to act on
    assert not isinstance(info.value, Unauthorized)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        (
            {**GOOD_CLAIMS, "iss": "https://evil.example"},
            "token issuer 'https://evil.example' is not Google",
        ),
        ({k: v for k, v in GOOD_CLAIMS.items() if k != "iss"}, "token issuer None is not Google"),
        ({**GOOD_CLAIMS, "email_verified": False}, f"token email '{CALLER}' is not verified"),
        ({k: v for k, v in GOOD_CLAIMS.items() if k != "email_verified"}, "is not verified"),
        ({**GOOD_CLAIMS, "email_verified": "false"}, "is not verified"),
        ({**GOOD_CLAIMS, "email_verified": "true"}, "is not verified"),
        ({**GOOD_CLAIMS, "email_verified": 1}, "is not verified"),
        (
            {**GOOD_CLAIMS, "email": "someone@else.example"},
            "caller 'someone@else.example' may not call",
        ),
        ({k: v for k, v in GOOD_CLAIMS.items() if k != "email"}, "caller '' may not call"),
    ],
    ids=[
        "wrong-issuer",
        "no-issuer",
        "unverified",
        "no-verified-claim",
        "verified-string-false",
        "verified-string-true",
        "verified-number",
        "not-allowed",
        "no-email",
    ],
)
def test_claims_that_are_not_an_allowed_google_caller_are_unauthorized(
    claims: dict[str, Any], message: str
) -> None:
    with pytest.raises(Unauthorized, match=None) as info:
        verifier(FakeVerify(claims=claims)).verify("Bearer tok")
    assert message in str(info.value)


# -- CachingRequest ---------------------------------------------------------------------------


def test_gets_within_the_ttl_are_served_from_the_cache() -> None:
    inner = CountingTransport()
    request = CachingRequest(inner, ttl_s=300)  # type: ignore[arg-type]
    first = request(GOOGLE_CERTS_URL)
    second = request(GOOGLE_CERTS_URL, method="GET", timeout=5)
    assert second is first
    assert inner.calls == [(GOOGLE_CERTS_URL, "GET")]


def test_each_url_is_cached_separately() -> None:
    inner = CountingTransport()
    request = CachingRequest(inner)  # type: ignore[arg-type]
    request("http://a/certs")
    request("http://b/certs")
    request("http://a/certs")
    assert [url for url, _ in inner.calls] == ["http://a/certs", "http://b/certs"]


def test_a_get_after_the_ttl_is_fetched_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # given a monotonic clock the test moves, and a 300 s TTL
    now = [1000.0]
    monkeypatch.setattr(auth, "time", SimpleNamespace(monotonic=lambda: now[0]))
    inner = CountingTransport()
    request = CachingRequest(inner, ttl_s=300)  # type: ignore[arg-type]
    request(GOOGLE_CERTS_URL)
    # when 299 s pass the cache answers; when 300 s have passed it asks again
    now[0] += 299
    request(GOOGLE_CERTS_URL)
    assert len(inner.calls) == 1
    now[0] += 1
    refreshed = request(GOOGLE_CERTS_URL)
    assert len(inner.calls) == 2
    assert b"#2" in refreshed.data


def test_other_methods_are_never_cached() -> None:
    inner = CountingTransport()
    request = CachingRequest(inner)  # type: ignore[arg-type]
    request("http://a/token", method="POST", body=b"x")
    request("http://a/token", method="POST", body=b"x")
    assert inner.calls == [("http://a/token", "POST"), ("http://a/token", "POST")]


def test_an_error_response_is_not_cached() -> None:
    inner = CountingTransport(status=503)
    request = CachingRequest(inner)  # type: ignore[arg-type]
    request(GOOGLE_CERTS_URL)
    request(GOOGLE_CERTS_URL)
    assert len(inner.calls) == 2


NOT_CERTS = {
    "html": b"<html><body>Service Unavailable</body></html>",
    "truncated": b'{"k1": "-----BEGIN CERTIFICATE-----\\nMIIC',
    "empty-object": b"{}",
    "empty-jwk-set": b'{"keys": []}',
    "not-pems": b'{"k1": "hello"}',
    "nan": b'{"k1": NaN}',
    "a-list": b'["-----BEGIN CERTIFICATE-----"]',
}


@pytest.mark.parametrize("body", NOT_CERTS.values(), ids=NOT_CERTS.keys())
def test_a_200_that_is_not_certs_is_not_cached(body: bytes) -> None:
    # given the certs URL answers 200 with something that is not a certs document
    inner = CountingTransport(body=body)
    request = CachingRequest(inner)  # type: ignore[arg-type]
    # when it is asked twice
    request(GOOGLE_CERTS_URL)
    request(GOOGLE_CERTS_URL)
    # then it was fetched twice: a bad answer is not kept for five minutes
    assert len(inner.calls) == 2


# -- KeyedVerify: the real checks, with keys parsed once -------------------------------------

AUDIENCE = "https://worker.example.run.app"
NOW_S = 1_800_000_000


@pytest.fixture(scope="module")
def issuer() -> Any:
    from relayflow.emulators.cloud_tasks.oidc import TokenIssuer

    return TokenIssuer.generate()


@dataclass
class CertsTransport:
    """Serves one certs document; a new response object only when told to (a refetch)."""

    certs: dict[str, str]
    fetches: int = 0
    response: FakeResponse | None = None

    def __call__(self, url: str, method: str = "GET", **kwargs: Any) -> FakeResponse:
        if self.response is None:
            self.fetches += 1
            self.response = FakeResponse(data=json.dumps(self.certs).encode())
        return self.response


def keyed(issuer: Any, now_s: float = NOW_S) -> tuple[TokenVerifier, CertsTransport]:
    transport = CertsTransport(issuer.certs())
    checked = TokenVerifier(
        audience=AUDIENCE,
        allowed_emails=[CALLER],
        request=transport,  # type: ignore[arg-type]
        verify=auth.KeyedVerify(clock=lambda: now_s),
    )
    return checked, transport


def test_a_token_signed_by_the_certs_key_passes_and_the_keys_are_parsed_once(
    issuer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = auth._key
    monkeypatch.setattr(auth, "_key", lambda pem: parsed.append(pem) or real(pem))
    checked, _ = keyed(issuer)
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)

    for _ in range(3):
        assert checked.verify(f"Bearer {token}") == CALLER
    assert len(parsed) == len(issuer.certs())  # once, not once per token


def test_a_new_certs_response_is_parsed_again(issuer: Any) -> None:
    checked, transport = keyed(issuer)
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)
    checked.verify(f"Bearer {token}")
    transport.response = None  # the cache expired: the next call fetches anew

    assert checked.verify(f"Bearer {token}") == CALLER
    assert transport.fetches == 2


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda t: t[:-6] + ("AAAAAA" if not t.endswith("AAAAAA") else "BBBBBB"), "signature"),
        (lambda t: t.split(".")[0] + "." + t.split(".")[1], "three dot-separated parts"),
        (lambda t: "x" + t, "not a JWT"),
    ],
    ids=["bad-signature", "two-parts", "garbled-header"],
)
def test_a_tampered_token_is_unauthorized(issuer: Any, mutate: Any, reason: str) -> None:
    checked, _ = keyed(issuer)
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)
    with pytest.raises(Unauthorized, match=reason):
        checked.verify(f"Bearer {mutate(token)}")


def test_a_token_for_another_audience_is_unauthorized(issuer: Any) -> None:
    checked, _ = keyed(issuer)
    token = issuer.token(email=CALLER, audience="https://poller.example.run.app", now_s=NOW_S)
    with pytest.raises(Unauthorized, match="wrong audience"):
        checked.verify(f"Bearer {token}")


@pytest.mark.parametrize(("offset_s", "reason"), [(-3700, "expired"), (+60, "too early")])
def test_a_token_outside_its_times_is_unauthorized(offset_s: int, reason: str) -> None:
    from relayflow.emulators.cloud_tasks.oidc import TokenIssuer

    issuer = TokenIssuer.generate()  # its own: an issuer reuses a recent token
    checked, _ = keyed(issuer, now_s=NOW_S)
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S + offset_s)
    with pytest.raises(Unauthorized, match=reason):
        checked.verify(f"Bearer {token}")


def test_a_token_with_another_algorithm_is_unauthorized(issuer: Any) -> None:
    import base64

    checked, _ = keyed(issuer)
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).rstrip(b"=")
    forged = header.decode() + "." + token.split(".", 1)[1]
    with pytest.raises(Unauthorized, match="not RS256"):
        checked.verify(f"Bearer {forged}")


# --- Certs that cannot be had: unavailable (503), never an invalid token, never cached ----------


@dataclass
class ScriptedCerts:
    """A certs URL that answers each fetch with the next (status, body) of a script."""

    answers: list[tuple[int, bytes] | Exception]
    fetches: int = 0

    def __call__(self, url: str, method: str = "GET", **kwargs: Any) -> FakeResponse:
        self.fetches += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return FakeResponse(status=answer[0], data=answer[1])


def scripted(issuer: Any, *answers: tuple[int, bytes] | Exception) -> tuple[Any, ScriptedCerts]:
    transport = ScriptedCerts(list(answers))
    checked = TokenVerifier(
        audience=AUDIENCE,
        allowed_emails=[CALLER],
        request=CachingRequest(transport),  # type: ignore[arg-type]
        verify=auth.KeyedVerify(clock=lambda: NOW_S),
    )
    return checked, transport


def good_certs(issuer: Any) -> tuple[int, bytes]:
    return 200, json.dumps(issuer.certs()).encode()


@pytest.mark.parametrize("body", NOT_CERTS.values(), ids=NOT_CERTS.keys())
def test_a_200_that_is_not_certs_is_unavailable_and_forgotten_at_once(
    issuer: Any, body: bytes
) -> None:
    # given the certs URL answers 200 with something that is not certs, then real certs
    checked, transport = scripted(issuer, (200, body), good_certs(issuer))
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)
    # when a good token is checked, it is not called invalid: the check is unavailable
    with pytest.raises(VerifierUnavailable, match="not certs"):
        checked.verify(f"Bearer {token}")
    # then the next request fetches again (nothing was cached, keys included) and passes
    assert checked.verify(f"Bearer {token}") == CALLER
    assert transport.fetches == 2


def test_certs_that_do_not_parse_as_keys_are_unavailable(issuer: Any) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"
    checked, _ = scripted(issuer, (200, json.dumps({"k": pem}).encode()))
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)
    with pytest.raises(VerifierUnavailable, match="do not parse"):
        checked.verify(f"Bearer {token}")


@pytest.mark.parametrize(
    "answer",
    [
        (503, b"Service Unavailable"),
        (500, b""),
        (404, b"Not Found"),
        auth_exceptions.TransportError("Connection refused"),
        TimeoutError("timed out"),
    ],
    ids=["503", "500", "404", "transport-error", "timeout"],
)
def test_a_certs_outage_is_unavailable_not_an_invalid_token(
    issuer: Any, answer: tuple[int, bytes] | Exception
) -> None:
    # given the certs URL is down, then back
    checked, _ = scripted(issuer, answer, good_certs(issuer))
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)
    # when a good token is checked during the outage: 503 material, not 401
    with pytest.raises(VerifierUnavailable, match="cannot fetch the certs") as info:
        checked.verify(f"Bearer {token}")
    assert not isinstance(info.value, Unauthorized)
    # then once the certs are back the same token passes
    assert checked.verify(f"Bearer {token}") == CALLER


# --- Times that never end, and email_verified only as a JSON true -------------------------------


def signed(issuer: Any, **claims: Any) -> str:
    payload = {
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "email": CALLER,
        "email_verified": True,
        "iat": NOW_S,
        "exp": NOW_S + 3600,
        **claims,
    }
    token: str = issuer._sign(payload)
    return token


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": math.nan},
        {"exp": math.inf},
        {"iat": -math.inf},
        {"iat": math.nan},
        {"exp": True},
        {"exp": "1900000000"},
    ],
    ids=["exp-nan", "exp-infinity", "iat-minus-infinity", "iat-nan", "exp-bool", "exp-string"],
)
def test_a_token_whose_times_are_not_finite_numbers_is_unauthorized(
    issuer: Any, claims: dict[str, Any]
) -> None:
    # given a token signed by the certs' key whose exp or iat is NaN, ±Infinity (Python's JSON
    # parses them), a bool or a string — NaN compares false with everything: never expired
    checked, _ = keyed(issuer, now_s=NOW_S + 7 * 24 * 3600)
    with pytest.raises(Unauthorized, match=r"not a JWT|finite numeric"):
        checked.verify(f"Bearer {signed(issuer, **claims)}")


def test_email_verified_must_be_the_json_boolean_true(issuer: Any) -> None:
    checked, _ = keyed(issuer)
    assert checked.verify(f"Bearer {signed(issuer)}") == CALLER
    for value in ("false", "true", 1, None):
        with pytest.raises(Unauthorized, match="is not verified"):
            checked.verify(f"Bearer {signed(issuer, email_verified=value)}")


# --- Audiences that are a client's, not a service's: young tokens only --------------------------

GCLOUD = "32555940559.apps.googleusercontent.com"


def with_client_audience(issuer: Any, now_s: float) -> TokenVerifier:
    return TokenVerifier(
        audience=[AUDIENCE, GCLOUD],
        allowed_emails=[CALLER],
        request=CertsTransport(issuer.certs()),  # type: ignore[arg-type]
        verify=auth.KeyedVerify(clock=lambda: now_s),
        audience_max_age_s={GCLOUD: 300},
        clock=lambda: now_s,
    )


def test_a_client_audience_admits_only_tokens_younger_than_its_maximum_age(issuer: Any) -> None:
    # given gcloud's client is an audience, for tokens up to 300 s old
    token = signed(issuer, aud=GCLOUD)
    # then a fresh gcloud token passes, one issued 301 s ago (replayed from elsewhere) does not
    assert with_client_audience(issuer, NOW_S + 300).verify(f"Bearer {token}") == CALLER
    with pytest.raises(Unauthorized, match="issued 301 s ago; tokens for it are accepted for 300"):
        with_client_audience(issuer, NOW_S + 301).verify(f"Bearer {token}")


def test_a_token_for_the_services_own_url_keeps_its_whole_lifetime(issuer: Any) -> None:
    token = signed(issuer)
    assert with_client_audience(issuer, NOW_S + 3500).verify(f"Bearer {token}") == CALLER


# --- JSON nested too deep: refused, never a 500 ------------------------------------------------


def test_a_token_whose_json_nests_too_deep_is_unauthorized(issuer: Any) -> None:
    import base64

    checked, _ = keyed(issuer)
    deep = base64.urlsafe_b64encode(b"[" * 200_000).rstrip(b"=").decode()
    token = issuer.token(email=CALLER, audience=AUDIENCE, now_s=NOW_S)
    for forged in (f"{deep}.{token.split('.', 1)[1]}", f"{token.split('.')[0]}.{deep}.AAAA"):
        with pytest.raises(Unauthorized, match="not a JWT: its JSON is nested too deep"):
            checked.verify(f"Bearer {forged}")


def test_a_recursion_error_in_google_auth_is_unauthorized() -> None:
    with pytest.raises(Unauthorized, match="nested too deep"):
        verifier(FakeVerify(error=RecursionError("maximum recursion depth exceeded"))).verify(
            "Bearer tok"
        )


def test_certs_nested_too_deep_are_not_certs_and_not_cached() -> None:
    inner = CountingTransport(body=b"[" * 200_000)
    request = CachingRequest(inner)  # type: ignore[arg-type]
    request(GOOGLE_CERTS_URL)
    request(GOOGLE_CERTS_URL)
    assert len(inner.calls) == 2
