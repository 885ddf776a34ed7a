"""The api service (Cloud Run): read and operate flows. Callers are authorised by Cloud Run IAM."""

from __future__ import annotations

from relayflow.runtime import boot
from relayflow.web.services import api_app

app = api_app(boot("relayflow-api"))
