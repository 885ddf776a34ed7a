"""Every error relayflow raises, under one base class, by the family that decides what happens next.

The families are the classification of DESIGN invariant 7: retryable (try again with backoff),
permanent (end the flow, compensate), not-ready (poll again). Handlers raise these; the engine
never guesses from a message string.
"""

from __future__ import annotations


class RelayflowError(Exception):
    """Base class of every error relayflow raises on purpose."""


class StepError(RelayflowError):
    """Raised by a step handler; the subclass says whether trying again can help."""

    code = "STEP_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class RetryableError(StepError):
    """Raised when the same call may succeed later (timeouts, 5xx, 429, UNAVAILABLE)."""

    code = "RETRYABLE"

    def __init__(
        self, message: str, *, code: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class PermanentError(StepError):
    """Raised when trying again cannot help (4xx, validation, a business rejection)."""

    code = "PERMANENT"


class UnreadableSealedValue(RetryableError):
    """Raised when a sealed value of a flow does not open for a handler: the key that sealed
    it is not in this service's keyset, or the value was altered or moved to another flow or
    field. Retried as any retryable error (a deploy may bring the key back), so bounded."""

    code = "SEALED_UNREADABLE"


class SealingUnavailable(RelayflowError):
    """Raised when a flow marks sensitive fields and this process holds no key to seal them
    with (``RELAYFLOW_SENSITIVE_KEYSET``): nothing is stored in clear instead."""


class NotReady(RelayflowError):
    """Raised by a poll step when the awaited operation is not done yet: poll again later.

    Control flow, not a failure: it is logged at INFO. ``delay_s`` overrides the backoff for
    the next poll (e.g. an API that says when to come back); ``detail`` goes into the history.
    """

    def __init__(self, detail: str = "not ready", *, delay_s: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.delay_s = delay_s


class InvalidTransition(RelayflowError):
    """Raised when a status change is not an edge of the flow state machine."""


class InvalidMessage(RelayflowError):
    """Raised when a start message or task payload cannot be accepted; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownFlow(RelayflowError):
    """Raised when a flow name is not in the registry."""


class UnknownVersion(UnknownFlow):
    """Raised when a flow's name is registered but not the version asked for."""


class FlowNotFound(RelayflowError):
    """Raised when no flow document has the given id."""


class AmbiguousFlow(RelayflowError):
    """Raised when a flow id names flows of several tenants and the caller did not say whose."""


class ConfigError(RelayflowError):
    """Raised when a flow definition or setting is inconsistent."""


class Unauthorized(RelayflowError):
    """Raised when a request's bearer token is missing, invalid, or not from an allowed caller."""


class NotAllowed(Unauthorized):
    """Raised when a valid token names a caller who is not on the service's allowlist."""


class VerifierUnavailable(RelayflowError):
    """Raised when no token can be checked for now: the certs cannot be fetched (network
    error, 5xx) or are not certs. Retryable: answer 503, never 401, so Cloud Tasks and Pub/Sub
    try again and callers are not told their token is bad."""


class DeadLetterNotFound(RelayflowError):
    """Raised when no held dead letter has the id a replay names (replayed, or leased by
    another reader for up to the subscription's ack deadline)."""


class UnknownSchedule(RelayflowError):
    """Raised when no schedule of the deployed app has the name an operator gives."""


class AlreadyActed(InvalidTransition):
    """Raised when a bulk action's operation finds the flow already has its entry: the bulk
    action acted on it before (a batch run again after a crash), and does not act twice."""


class ChangedSince(InvalidTransition):
    """Raised when a bulk action's operation finds the flow changed since its dry run (another
    generation, another status): it acts on exactly what was previewed, so it skips it."""


class BulkNotFound(RelayflowError):
    """Raised when no bulk action has the id an operator gives (or the caller may not see it)."""


class BulkRefused(RelayflowError):
    """Raised when a bulk action cannot be made or changed as asked: too many flows match, it
    is not in a state that allows it (run twice, cancel a finished one), a bad filter."""


class PayloadMissing(PermanentError):
    """Raised when a value a flow offloaded to its bucket is gone (deleted, or aged out by the
    bucket's lifecycle): the flow ends rather than run on without it."""

    code = "PAYLOAD_MISSING"


class PayloadCorrupt(PermanentError):
    """Raised when an offloaded value's object does not match its reference (its SHA-256 or
    size), or a stored envelope cannot be read: never a wrong value."""

    code = "PAYLOAD_CORRUPT"


# What reading a stored value back may raise for good.
Unreadable = (PayloadMissing, PayloadCorrupt)


class PayloadUnavailable(RetryableError):
    """Raised when the bucket cannot be reached for now (a timeout, a 5xx, a 429)."""

    code = "PAYLOAD_UNAVAILABLE"


class UnknownTenant(RelayflowError):
    """Raised when an operator names a tenant that has no policy, no operator's state and is
    not the default one (or one the caller may not see)."""
