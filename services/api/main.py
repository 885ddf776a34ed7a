"""The api service (Cloud Run): read and operate flows. Callers are authorised by Cloud Run IAM."""

from __future__ import annotations

from relayflow.runtime import build_runtime
from relayflow.settings import load_settings
from relayflow.telemetry import configure_logging
from relayflow.web import api_app

configure_logging()
app = api_app(build_runtime(load_settings()))
