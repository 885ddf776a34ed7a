"""The api's request guard (relayflow.web.guard): no page of another origin can change state
through the operator's credentials, a rebound host name is refused with token verification
off, preflights get no CORS headers, every answer carries the security headers — and the
machines that call the api (the CLI, Pub/Sub's push, external systems) still get through.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from relayflow.core.dead_letters import DeadLetter
from relayflow.core.errors import ConfigError
from relayflow.core.state import Status
from relayflow.settings import Settings
from relayflow.web.access import Access
from relayflow.web.guard import RequestGuard, guard_from_settings

from .test_api import OPERATOR, Api, api, build, message, token, waiting_flow

__all__ = ["api"]  # the fixture, for the tests that use a verifying api

# The local stack's api, as its settings make the guard: 127.0.0.1:8129, tokens not verified.
LOCAL = Settings(api_verify_tokens=False, api_url="http://127.0.0.1:8129")
OWN_PAGE = {"Origin": "http://127.0.0.1:8129"}
REASON = {"reason": "forged"}


@pytest.fixture
def local() -> Api:
    api = build(Access(verifier=None), guard_from_settings(LOCAL))
    api.running_flow("f-1")
    api.dead_letters.letters.append(DeadLetter("dl-1", b'{"flow": "demo", "input": {}}', {}, None))
    return api


def at(**headers: str) -> dict[str, Any]:
    """Request options: ``headers``, sent to the local api at its own host."""
    return {"headers": headers, "base_url": "http://127.0.0.1:8129"}


# Every state-changing route, with a body it would take; a form for the console's.
JSON_ROUTES = [
    "/flows/f-1:cancel",
    "/flows/f-1:retry",
    "/dead-letters/dl-1:replay",
    "/tenants/default:pause",
    "/tenants/default:resume",
    "/callbacks",
    "/signals",
]
FORM_ROUTES = [
    "/console/flows/f-1/cancel",
    "/console/flows/f-1/retry",
    "/console/dead-letters/dl-1/replay",
]
FORGED = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # another port of localhost, say
    {"Origin": "https://evil.example"},
    {"Origin": "http://127.0.0.1:3000"},  # another server on this machine
    {"Origin": "null"},  # a sandboxed frame, or a page with no referrer policy to give
    {"Origin": "http://127.0.0.1:8129", "Sec-Fetch-Site": "cross-site"},
]


def unchanged(api: Api) -> None:
    """Nothing a forged request could have done happened."""
    assert api.harness.flow("f-1").status is Status.RUNNING
    assert api.dead_letters.replays == []
    assert not any(state.paused for state in api.harness.store.tenants.values())


@pytest.mark.parametrize("route", JSON_ROUTES)
@pytest.mark.parametrize("forged", FORGED)
def test_a_call_from_another_sites_page_is_refused_on_every_json_route(
    local: Api, route: str, forged: dict[str, str]
) -> None:
    response = local.client.post(route, json=REASON, **at(**forged))
    assert response.status_code == 403, response.get_data(as_text=True)
    assert "another site" in message(response) or "not on its list" in message(response)
    unchanged(local)


@pytest.mark.parametrize("route", FORM_ROUTES)
@pytest.mark.parametrize("forged", [*FORGED, {}])
def test_a_form_from_another_sites_page_or_from_none_is_refused(
    local: Api, route: str, forged: dict[str, str]
) -> None:
    response = local.client.post(route, data=REASON, **at(**forged))
    assert response.status_code == 403
    page = response.get_data(as_text=True)
    assert "another site" in page or "not on its list" in page
    unchanged(local)


def test_a_form_from_the_consoles_own_page_is_taken(local: Api) -> None:
    own = {**OWN_PAGE, "Sec-Fetch-Site": "same-origin"}
    done = local.client.post("/console/flows/f-1/cancel", data={"reason": "mine"}, **at(**own))
    assert done.status_code == 303
    assert local.harness.flow("f-1").status is not Status.RUNNING


@pytest.mark.parametrize(
    ("request_options", "status", "says"),
    [
        # what a page may send another origin with no preflight: no body, text, a form
        ({}, 400, "send a JSON object body with Content-Type: application/json"),
        ({"data": json.dumps(REASON), "content_type": "text/plain"}, 415, "'text/plain'"),
        ({"data": REASON}, 415, "'application/x-www-form-urlencoded'"),
        ({"data": "reason=x", "content_type": "multipart/form-data; boundary=b"}, 415, "multi"),
    ],
)
def test_a_json_route_takes_only_what_a_browser_must_preflight(
    local: Api, request_options: dict[str, Any], status: int, says: str
) -> None:
    response = local.client.post("/flows/f-1:cancel", **request_options, **at())
    assert response.status_code == status
    assert says in message(response)
    unchanged(local)


def test_a_bodiless_call_with_the_request_header_is_taken(local: Api) -> None:
    response = local.client.post("/flows/f-1:cancel", **at(**{"X-Relayflow-Request": "1"}))
    assert response.status_code == 200
    assert local.harness.flow("f-1").status is not Status.RUNNING


def test_the_api_never_answers_a_preflight_with_cors_headers(local: Api) -> None:
    preflight = local.client.options(
        "/flows/f-1:cancel",
        **at(**{
            "Origin": "https://evil.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, x-relayflow-request",
        }),
    )  # fmt: skip
    names = [name.lower() for name, _ in preflight.headers.items()]
    assert preflight.status_code == 200 and "allow" in names
    assert not [name for name in names if name.startswith("access-control-")]


def test_machines_still_call_the_api(api: Api) -> None:
    """The CLI (JSON, no Origin), Pub/Sub's push to /signals, and an external system that
    completes a callback with its token in a header: none is a browser, none is refused."""
    api.running_flow("f-1")
    cli = api.client.post("/flows/f-1:cancel", json={"reason": "cli"}, headers=token(OPERATOR))
    assert cli.status_code == 200
    hook = waiting_flow(api, "f-push")
    data = base64.b64encode(json.dumps({"token": hook, "output": {}}).encode()).decode()
    with open("tests/data/pubsub_push.json", encoding="utf-8") as golden:
        push = json.load(golden)
    push["message"]["data"] = data
    pushed = api.client.post("/signals", json=push, headers=token(OPERATOR))
    assert pushed.get_json()["outcome"] == "completed"
    hook = waiting_flow(api, "f-hook")
    system = api.client.post(
        "/callbacks",
        json={"registration_id": "r-1"},
        headers={**token(OPERATOR), "X-Relayflow-Callback-Token": hook},
    )
    assert system.status_code == 200 and system.get_json()["outcome"] == "completed"


# -- hosts: DNS rebinding with token verification off ---------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1:8129", "localhost:8129", "[::1]:8129"])
def test_the_local_api_answers_its_own_host_names(local: Api, host: str) -> None:
    assert local.client.get("/flows", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "host", ["evil.example:8129", "evil.example", "127.0.0.1:9999", "127.0.0.1.evil.example:8129"]
)
@pytest.mark.parametrize("path", ["/flows", "/flows/f-1", "/console/flows", "/metrics"])
def test_a_rebound_host_name_is_refused_even_for_reads(local: Api, host: str, path: str) -> None:
    response = local.client.get(path, headers={"Host": host})
    assert response.status_code == 403
    assert "does not answer to Host" in response.get_data(as_text=True)


def test_more_host_names_come_from_the_setting() -> None:
    settings = Settings(
        api_verify_tokens=False, api_url="http://127.0.0.1:8129", api_hosts=("devbox:8129",)
    )
    local = build(Access(verifier=None), guard_from_settings(settings))
    assert local.client.get("/flows", headers={"Host": "devbox:8129"}).status_code == 200
    assert local.client.get("/flows", headers={"Host": "devbox:80"}).status_code == 403


def test_with_verified_tokens_the_host_is_not_checked(api: Api) -> None:
    # the proxy rewrites Host to the run.app name; Cloud Run routes by it anyway
    response = api.client.get("/flows", headers={**token(OPERATOR), "Host": "api-xyz-uc.a.run.app"})
    assert response.status_code == 200


# -- the allowlist --------------------------------------------------------------------------


def test_the_origins_are_the_apis_own_and_the_proxys_by_default() -> None:
    cloud = guard_from_settings(Settings(api_url="https://api-xyz-uc.a.run.app"))
    assert cloud.origins == {
        "https://api-xyz-uc.a.run.app",
        "http://localhost:8080",
        "http://127.0.0.1:8080",
    }
    local = guard_from_settings(LOCAL)
    assert {"http://127.0.0.1:8129", "http://localhost:8129", "http://[::1]:8129"} <= local.origins
    listed = Settings(
        api_url="https://api-xyz-uc.a.run.app", api_origins=("https://Ops.Example.com:443",)
    )
    assert guard_from_settings(listed).origins == {
        "https://api-xyz-uc.a.run.app",
        "https://ops.example.com",
    }


@pytest.mark.parametrize("origin", ["ops.example.com", "https://ops.example.com/path", "null"])
def test_an_origin_setting_that_is_not_an_origin_is_refused(origin: str) -> None:
    with pytest.raises(ConfigError, match="RELAYFLOW_API_ORIGINS"):
        guard_from_settings(Settings(api_origins=(origin,)))


def test_the_default_guard_is_the_default_settings_one_at_any_loopback_port() -> None:
    assert RequestGuard().origins == guard_from_settings(Settings()).origins


# -- headers --------------------------------------------------------------------------------


def test_every_answer_carries_the_security_headers(local: Api) -> None:
    for path in ("/flows", "/flows/nope", "/console/flows", "/console/flows/f-1"):
        response = local.client.get(path, **at())
        assert response.headers["X-Frame-Options"] == "DENY", path
        assert response.headers["X-Content-Type-Options"] == "nosniff", path
        assert response.headers["Cache-Control"] == "no-store", path
        csp = response.headers["Content-Security-Policy"]
        for directive in ("frame-ancestors 'none'", "base-uri 'none'"):
            assert directive in csp, (path, csp)
    page = local.client.get("/console/flows", **at())
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "form-action 'self'" in csp
    # a page's forms must carry its Origin, which no-referrer would make "null"
    assert page.headers["Referrer-Policy"] == "same-origin"
    data = local.client.get("/flows", **at())
    assert data.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert data.headers["Referrer-Policy"] == "no-referrer"
