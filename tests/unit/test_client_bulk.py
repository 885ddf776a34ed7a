"""relayflow.Client's bulk actions: what it asks the api (tests/unit/test_bulk_api.py runs
the api itself)."""

from __future__ import annotations

from typing import Any

from relayflow.client import Client


class Recorded:
    """A transport that records each call and answers with the bulk action."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("POST", path, body))
        return {"id": "bulk-0123456789ab", "state": "previewed"}

    def get(self, path: str, query: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append(("GET", path, query))
        return {"id": "bulk-0123456789ab", "state": "running"}


def test_a_bulk_dry_run_then_its_run_and_progress_go_through_the_api() -> None:
    env = {"RELAYFLOW_API_URL": "http://127.0.0.1:9", "GOOGLE_CLOUD_PROJECT": "relayflow-local"}
    client = Client(environ=env)
    api = client.api = Recorded()  # type: ignore[assignment]

    made = client.bulk("retry", reason="API back", flow="registration", status="FAILED")
    client.bulk_run(made["id"], reason="go")
    assert client.bulk_status(made["id"])["state"] == "running"

    assert api.calls == [
        (
            "POST",
            "/bulk",
            {
                "action": "retry",
                "filter": {"flow": "registration", "status": "FAILED"},
                "reason": "API back",
                "rate_per_s": 5.0,
                "dry_run": True,
            },
        ),
        ("POST", "/bulk/bulk-0123456789ab:run", {"reason": "go"}),
        ("GET", "/bulk/bulk-0123456789ab", None),
    ]
