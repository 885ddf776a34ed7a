"""Health probes: is a component answering on its port the way it does when it is ready?"""

from __future__ import annotations

from enum import StrEnum


class Probe(StrEnum):
    """How a component shows it is up."""

    OK_BODY = "ok-body"  # the gcloud emulators: GET / answers "Ok"
    HTTP_2XX = "http-2xx"  # our emulators and services: GET /healthz answers 2xx
    ANY_HTTP = "any-http"  # functions-framework has no health route: any answer will do
    ALIVE = "alive"  # no port (the sweeper): healthy while its process lives


def is_healthy(url: str, probe: Probe, *, timeout_s: float = 1.0) -> bool:
    """One probe; connection errors and timeouts mean "not (yet) healthy". (An ALIVE component
    is healthy here; whether its process lives is the caller's check.)"""
    if probe is Probe.ALIVE:
        return True
    import requests  # here: the CLI imports this module to print its help, and must be quick

    # trust_env=False: a developer's HTTP(S)_PROXY must not swallow requests to 127.0.0.1.
    with requests.Session() as session:
        session.trust_env = False
        try:
            response = session.get(url, timeout=timeout_s)
        except requests.RequestException:
            return False
    if probe is Probe.ANY_HTTP:
        return True
    if probe is Probe.OK_BODY:
        return response.ok and response.text.strip() == "Ok"
    return response.ok
