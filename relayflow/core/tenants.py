"""Tenants: who a flow belongs to, and the limits that keep one tenant from crowding others.

A start message names its tenant (``tenant``, field or attribute; ``default`` when absent).
Each tenant may have a policy: the most flows running at once (``max_running``), the most starts
a second (``starts_per_s``) and a priority (``high`` tasks go to their own queues, ahead of a
``low`` backlog). Starts over a limit wait, and are admitted in order as room frees up.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from relayflow.core.errors import ConfigError

TENANT_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
DEFAULT_TENANT = "default"
Priority = Literal["high", "low"]


class TenantPolicy(BaseModel):
    """One tenant's limits; 0 means no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_running: int = Field(default=0, ge=0, le=10_000)
    starts_per_s: float = Field(default=0.0, ge=0.0, le=10_000.0)
    priority: Priority = "low"
    paused: bool = False  # the configured state; operators pause and resume at run time too

    @property
    def limited(self) -> bool:
        return self.max_running > 0

    @property
    def slot_cooldown_s(self) -> float:
        """How long a slot rests after it is taken, so starts stay under ``starts_per_s``:
        ``max_running`` slots each taken at most once per cooldown is the rate."""
        if not self.limited or self.starts_per_s <= 0:
            return 0.0
        return self.max_running / self.starts_per_s


class Tenants(BaseModel):
    """Every tenant's policy; a tenant not named gets ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: TenantPolicy = TenantPolicy()
    tenants: dict[str, TenantPolicy] = Field(default_factory=dict)

    @field_validator("tenants")
    @classmethod
    def _names(cls, tenants: dict[str, TenantPolicy]) -> dict[str, TenantPolicy]:
        bad = sorted(t for t in tenants if not re.fullmatch(TENANT_PATTERN, t))
        if bad:
            raise ValueError(f"tenant names {bad} must match {TENANT_PATTERN}")
        return tenants

    def label(self, tenant: str) -> str:
        """The tenant as a metric label: a configured one (or ``default``) by name, any other
        as ``other``, so publishers cannot mint unbounded label values."""
        return tenant if tenant in self.tenants or tenant == DEFAULT_TENANT else "other"

    def policy(self, tenant: str) -> TenantPolicy:
        return self.tenants.get(tenant, self.default)

    @classmethod
    def parse(cls, text: str) -> Tenants:
        """From ``RELAYFLOW_TENANTS`` (JSON): ``{"default": {...}, "tenants": {"a": {...}}}``."""
        if not text.strip():
            return cls()
        try:
            return cls.model_validate(json.loads(text))
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"RELAYFLOW_TENANTS is not a valid tenants policy: {exc}") from None
