"""What protects each dependency, as configured: a circuit breaker and a retry budget per
dependency flows call, from ``RELAYFLOW_DEPENDENCIES``; one not named gets the default.

This is the configuration, as ``relayflow.core.tenants`` is for tenants; the breakers at run
time are ``relayflow.core.breakers``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from relayflow.core.errors import ConfigError

DEPENDENCY_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
# The window is counted in buckets of a second (more for windows over 30 s): a breaker
# judges the newest buckets first, so it reacts within a second or two of an outage however
# many successes the rest of the window holds.
BUCKETS_PER_WINDOW = 30


class BreakerPolicy(BaseModel):
    """One dependency's breaker and retry budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    window_s: float = Field(default=30.0, ge=5.0, le=3600.0)
    min_calls: int = Field(default=20, ge=1, le=100_000)
    failure_rate: float = Field(default=0.5, gt=0.0, le=1.0)
    # Open for ``open_s``, doubling after each failed probe up to ``max_open_s`` (by default
    # not at all). A round of probes while the dependency is still down is one call (the
    # first probe goes alone) and two writes of the breaker's document, so probing every
    # second costs the dependency 60 calls a minute however many flows wait. How long the
    # breaker stays open bounds how soon after the dependency's return the flows go on: half
    # of ``open_s`` on average (measured by bench/outage.py: the flows due meanwhile are put
    # off and brought forward, and on a busy stack that time is lost to recovery).
    open_s: float = Field(default=1.0, gt=0.0, le=3600.0)
    max_open_s: float = Field(default=1.0, gt=0.0, le=3600.0)
    probes: int = Field(default=3, ge=1, le=100)
    # A probe whose outcome never came (its instance died) stops counting after this long.
    probe_lease_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    retry_budget: float = Field(default=0.2, ge=0.0, le=10.0)
    min_retries: int = Field(default=10, ge=0, le=100_000)
    # The longest a put-off step waits before it looks again (its own backoff grows to this).
    max_defer_s: float = Field(default=30.0, ge=1.0, le=3600.0)

    @property
    def bucket_s(self) -> float:
        return max(1.0, self.window_s / BUCKETS_PER_WINDOW)

    def open_for_s(self, opened: int) -> float:
        """How long the breaker stays open the ``opened``-th time in a row (1 = the first)."""
        doubled: float = self.open_s * 2.0 ** max(0, opened - 1)
        return min(doubled, max(self.max_open_s, self.open_s))


class Dependencies(BaseModel):
    """Every dependency's policy; one not named gets ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: BreakerPolicy = BreakerPolicy()
    dependencies: dict[str, BreakerPolicy] = Field(default_factory=dict)

    @field_validator("dependencies")
    @classmethod
    def _names(cls, found: dict[str, BreakerPolicy]) -> dict[str, BreakerPolicy]:
        bad = sorted(name for name in found if not re.fullmatch(DEPENDENCY_PATTERN, name))
        if bad:
            raise ValueError(f"dependency names {bad} must match {DEPENDENCY_PATTERN}")
        return found

    def policy(self, dependency: str) -> BreakerPolicy:
        return self.dependencies.get(dependency, self.default)

    @classmethod
    def off(cls) -> Dependencies:
        """Breakers and budgets off for every dependency (calls are still counted)."""
        return cls(default=BreakerPolicy(enabled=False))

    @classmethod
    def parse(cls, text: str) -> Dependencies:
        """From ``RELAYFLOW_DEPENDENCIES`` (JSON)."""
        if not text.strip():
            return cls()
        try:
            return cls.model_validate_json(text)
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"RELAYFLOW_DEPENDENCIES is not a valid policy: {exc}") from None
