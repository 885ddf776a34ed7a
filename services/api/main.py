"""The api service (Cloud Run): read and operate flows. Callers are authorised by Cloud Run IAM."""

from __future__ import annotations

from relayflow.runtime import build_runtime
from relayflow.settings import load_settings
from relayflow.telemetry import configure_logging, configure_tracing
from relayflow.web.services import api_app

settings = load_settings()
configure_logging(project_id=settings.project_id)
app = api_app(build_runtime(settings, tracer=configure_tracing(settings, service="relayflow-api")))
