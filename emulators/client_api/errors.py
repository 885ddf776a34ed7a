"""The one error type of the fake client API, rendered as ``{"error": {"code", "message"}}``."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """Raised when a request is refused; carries the HTTP status and a machine-readable code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}
