"""The console (placeholder while it is written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Blueprint

if TYPE_CHECKING:
    from relayflow.web.api import Operations


def blueprint(ops: Operations) -> Blueprint:
    return Blueprint("console", __name__, url_prefix="/console")
