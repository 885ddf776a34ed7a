"""Request bodies of the fake client API, validated with pydantic (extra fields are refused)."""

from __future__ import annotations

from enum import StrEnum
from typing import Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

UNLIMITED = -1


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CallbackMode(StrEnum):
    """How the API reports a registration's activation to its ``callback_url``."""

    ON_TIME = "on_time"  # once, when it becomes ACTIVE
    LATE = "late"  # once, ``callback_late_s`` after it became ACTIVE
    TWICE = "twice"  # when it becomes ACTIVE, and again ``callback_late_s`` later
    NEVER = "never"  # the callback is lost


class RegistrationRequest(_Strict):
    resource: str = Field(min_length=1, max_length=500)
    # Opaque to the API: it POSTs there as given.
    callback_url: str | None = Field(default=None, min_length=1, max_length=2000)
    # Opaque too: sent back with each callback in the CALLBACK_TOKEN_HEADER header, never in
    # the URL (a URL reaches access logs), and never shown in a registration.
    callback_token: str | None = Field(
        default=None, min_length=1, max_length=500, pattern=r"^[\x21-\x7e]+$"
    )

    @field_validator("callback_url")
    @classmethod
    def _absolute_http(cls, url: str | None) -> str | None:
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("callback_url must be an absolute http:// or https:// URL")
        return url

    @model_validator(mode="after")
    def _token_needs_url(self) -> Self:
        if self.callback_token is not None and self.callback_url is None:
            raise ValueError("callback_token needs a callback_url to send it to")
        return self


class EntityRequest(_Strict):
    registration_id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=500)


class ConfigUpdate(_Strict):
    """A partial change of timing and callbacks; the per-resource maps are merged, not replaced."""

    activation_delay_s: float | None = Field(default=None, ge=0)
    # None as a value means "never activates" (the timeout test's stuck registration).
    resource_delays: dict[str, float | None] = Field(default_factory=dict)
    callback_modes: dict[str, CallbackMode] = Field(default_factory=dict)
    callback_default_mode: CallbackMode | None = None
    callback_late_s: float | None = Field(default=None, ge=0)


class FaultRule(_Strict):
    """One injected fault: matching requests fail and/or answer slowly (see faults.py)."""

    method: str | None = None  # None matches any method
    path_prefix: str = "/"
    status: int | None = Field(default=None, ge=400, le=599)  # None: only slow, then normal
    retry_after_s: float | None = Field(default=None, ge=0)
    delay_s: float = Field(default=0.0, ge=0, le=300)
    # How many requests the rule fires on; null or -1: it never runs out.
    count: int | None = 1
    # The rule's share of the matching requests (shares of several rules add up).
    probability: float = Field(default=1.0, gt=0, le=1)
    # Perform the request, then answer `status` anyway: the "response was lost" case that only
    # an idempotency key makes safe to retry.
    after_effect: bool = False

    @model_validator(mode="after")
    def _does_something(self) -> Self:
        if self.status is None and self.delay_s == 0:
            raise ValueError("a fault rule needs a status, a delay_s, or both")
        if self.after_effect and self.status is None:
            raise ValueError("after_effect needs a status")
        if self.count is not None and self.count != UNLIMITED and self.count < 1:
            raise ValueError("count must be at least 1, or null / -1 for unlimited")
        return self

    @property
    def budget(self) -> int | None:
        """How many requests the rule may still fire on; None for never running out."""
        return None if self.count in (None, UNLIMITED) else self.count

    def matches(self, method: str, path: str) -> bool:
        method_ok = self.method is None or self.method.upper() == method.upper()
        return method_ok and path.startswith(self.path_prefix)
