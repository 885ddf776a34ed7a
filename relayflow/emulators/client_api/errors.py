"""The one error type of the fake APIs, rendered as ``{"error": {"code", "message"}}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """Raised when a request is refused; carries the HTTP status and a machine-readable code."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        # Sent with the answer, e.g. Retry-After on a 429.
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}
