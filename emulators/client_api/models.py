"""Request bodies of the fake client API, validated with pydantic (extra fields are refused)."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RegistrationRequest(_Strict):
    resource: str = Field(min_length=1, max_length=500)


class EntityRequest(_Strict):
    registration_id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=500)


class ConfigUpdate(_Strict):
    """A partial change of the activation timing; ``resource_delays`` is merged, not replaced."""

    activation_delay_s: float | None = Field(default=None, ge=0)
    # None as a value means "never activates" (the timeout test's stuck registration).
    resource_delays: dict[str, float | None] = Field(default_factory=dict)


class FaultRule(_Strict):
    """One injected fault: the next ``count`` matching requests fail and/or answer slowly."""

    method: str | None = None  # None matches any method
    path_prefix: str = "/"
    status: int | None = Field(default=None, ge=400, le=599)  # None: only slow, then normal
    retry_after_s: float | None = Field(default=None, ge=0)
    delay_s: float = Field(default=0.0, ge=0, le=300)
    count: int = Field(default=1, ge=1)
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
        return self

    def matches(self, method: str, path: str) -> bool:
        method_ok = self.method is None or self.method.upper() == method.upper()
        return method_ok and path.startswith(self.path_prefix)
