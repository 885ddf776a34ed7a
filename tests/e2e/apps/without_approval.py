"""The reference app without its approval flow: the app tests/e2e/test_versions.py would deploy
over the local stack's (which registers approval v1), so that `relayflow versions check` has a
version to refuse to drop while approval flows wait."""

from __future__ import annotations

from relayflow import Registry, Settings
from relayflow.apps.registration import build_registry as reference


def build_registry(settings: Settings) -> Registry:
    full = reference(settings)
    return Registry([f for f in full if f.name != "approval"], schedules=full.schedules)
