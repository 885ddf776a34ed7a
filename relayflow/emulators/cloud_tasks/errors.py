"""API errors, each carrying the gRPC code the real service answers with."""

from __future__ import annotations

from grpc import StatusCode

# HTTP statuses Google's JSON error shape pairs with each gRPC code.
_HTTP_STATUS: dict[StatusCode, int] = {
    StatusCode.INVALID_ARGUMENT: 400,
    StatusCode.FAILED_PRECONDITION: 400,
    StatusCode.NOT_FOUND: 404,
    StatusCode.ALREADY_EXISTS: 409,
    StatusCode.UNIMPLEMENTED: 501,
    StatusCode.INTERNAL: 500,
}


class ApiError(Exception):
    """Raised when a request is refused; the base of every API error."""

    code: StatusCode = StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS.get(self.code, 500)

    @property
    def status_name(self) -> str:
        return str(self.code.name)

    def to_json(self) -> dict[str, object]:
        """Google's JSON error body."""
        return {
            "error": {
                "code": self.http_status,
                "message": self.message,
                "status": self.status_name,
            }
        }


class InvalidArgument(ApiError):
    """Raised when a request field is malformed or out of range."""

    code = StatusCode.INVALID_ARGUMENT


class NotFound(ApiError):
    """Raised when a queue or task does not exist (or no longer exists)."""

    code = StatusCode.NOT_FOUND


class AlreadyExists(ApiError):
    """Raised when a queue exists, or a task name exists or existed too recently."""

    code = StatusCode.ALREADY_EXISTS


class FailedPrecondition(ApiError):
    """Raised when the request is valid but the resource's state forbids it."""

    code = StatusCode.FAILED_PRECONDITION


class Unimplemented(ApiError):
    """Raised for API methods the emulator does not provide (IAM, CMEK)."""

    code = StatusCode.UNIMPLEMENTED


class Internal(ApiError):
    """Raised in place of any unexpected exception, so a client sees INTERNAL, not UNKNOWN."""

    code = StatusCode.INTERNAL
