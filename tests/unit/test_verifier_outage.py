"""When Google's certs cannot be had, the api answers 503 (retry later), not 401 (your token is
bad): a certs outage must not read as every caller's fault (issue 18)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from relayflow.gcp.auth import TokenVerifier
from relayflow.web.access import Access
from tests.unit.test_api import API_URL, CERTS_URL, VIEWER, build, token


def certs_down(url: str, method: str = "GET", **_: Any) -> Any:
    return SimpleNamespace(status=503, data=b"<html>unavailable</html>", headers={})


def test_a_certs_outage_answers_503_not_401() -> None:
    verifier = TokenVerifier(
        audience=API_URL, allowed_emails={VIEWER}, certs_url=CERTS_URL, request=certs_down
    )
    api = build(Access(verifier=verifier, viewers=frozenset({VIEWER})))

    response = api.client.get("/flows", headers=token(VIEWER))

    assert response.status_code == 503, response.get_data(as_text=True)
    assert response.get_json()["error"]["status"] == "UNAVAILABLE"


def test_a_certs_outage_on_a_task_route_answers_503_so_cloud_tasks_retries() -> None:
    from relayflow.runtime import Runtime
    from relayflow.settings import Settings
    from relayflow.telemetry import Counters
    from relayflow.testing import Harness
    from relayflow.topology import load_topology
    from relayflow.web.services import task_app
    from tests.unit.test_api import FLOW

    h = Harness(FLOW)
    verifier = TokenVerifier(
        audience=API_URL, allowed_emails={VIEWER}, certs_url=CERTS_URL, request=certs_down
    )
    runtime = Runtime(Settings(), load_topology(), h.engine, h.store, Counters())  # type: ignore[arg-type]
    client = task_app(runtime, route="/tasks/step", verifier=verifier).test_client()

    response = client.post("/tasks/step", json={}, headers=token(VIEWER))

    assert response.status_code == 503
