"""OIDC tokens on dispatch, verified with google-auth against the emulator's certs URL."""

from __future__ import annotations

from typing import Any

import google.auth.transport.requests
import pytest
from google.oauth2 import id_token

from relayflow.emulators.cloud_tasks.testing import EmulatorProcess, RecordingTarget

SERVICE_ACCOUNT = "invoker@test-project.iam.gserviceaccount.com"


def bearer(headers: dict[str, str]) -> str:
    scheme, _, token = headers["Authorization"].partition(" ")
    assert scheme == "Bearer"
    return token


@pytest.mark.parametrize("audience", ["", "https://my-service.run.app"])
def test_oidc_token_verifies_like_googles(
    emulator: EmulatorProcess,
    grpc_client: Any,
    make_queue: Any,
    target: RecordingTarget,
    audience: str,
) -> None:
    queue = make_queue()
    url = target.url("/secure?k=v")
    grpc_client.create_task(
        parent=queue.name,
        task={
            "http_request": {
                "url": url,
                "oidc_token": {"service_account_email": SERVICE_ACCOUNT, "audience": audience},
            }
        },
    )
    hit = target.hits_for("/secure", 1)[0]

    claims = id_token.verify_token(
        bearer(hit.headers),
        google.auth.transport.requests.Request(),
        audience=audience or url,  # the audience defaults to the task's full target URL
        certs_url=emulator.certs_url,
    )

    assert claims["iss"] == "https://accounts.google.com"
    assert claims["email"] == SERVICE_ACCOUNT
    assert claims["email_verified"] is True
    assert claims["sub"].isdigit()
    assert claims["exp"] - claims["iat"] == 3600


def test_a_token_for_another_audience_is_rejected(
    emulator: EmulatorProcess, grpc_client: Any, make_queue: Any, target: RecordingTarget
) -> None:
    queue = make_queue()
    grpc_client.create_task(
        parent=queue.name,
        task={
            "http_request": {
                "url": target.url("/aud"),
                "oidc_token": {"service_account_email": SERVICE_ACCOUNT, "audience": "https://a"},
            }
        },
    )
    hit = target.hits_for("/aud", 1)[0]

    with pytest.raises(ValueError, match="audience"):
        id_token.verify_token(
            bearer(hit.headers),
            google.auth.transport.requests.Request(),
            audience="https://b",
            certs_url=emulator.certs_url,
        )
