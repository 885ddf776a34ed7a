"""The api service (Cloud Run): read and operate flows, and the console. Callers pass Cloud Run
IAM, then the api verifies their ID token and gives them a role (relayflow.web.access)."""

from __future__ import annotations

from relayflow.runtime import boot
from relayflow.web.api import api_app

app = api_app(boot("relayflow-api"))
