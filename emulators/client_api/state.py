"""The fake client API's state: registrations, entities, idempotency records and counters.

All of it sits behind one lock, so a check-then-create under an idempotency key is atomic even
when two retries of the same request arrive at once. Time comes from an injected clock (epoch
seconds), so activation is computed on read and tests never sleep.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from emulators.client_api.errors import ApiError
from emulators.client_api.models import ConfigUpdate

Clock = Callable[[], float]
IdFactory = Callable[[str], str]

REJECT_PREFIX = "reject-"


class Status(StrEnum):
    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    CANCELLED = "CANCELLED"


@dataclass
class Registration:
    id: str
    resource: str
    created_at: float
    # Fixed at creation, like a real long-running operation: None means it never activates.
    activates_at: float | None
    cancelled: bool = False

    def status(self, now: float) -> Status:
        if self.cancelled:
            return Status.CANCELLED
        if self.activates_at is not None and now >= self.activates_at:
            return Status.ACTIVE
        return Status.PENDING

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "resource": self.resource,
            "status": self.status(now).value,
            "created_at": _rfc3339(self.created_at),
        }


@dataclass(frozen=True)
class Entity:
    id: str
    registration_id: str
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "registration_id": self.registration_id, "name": self.name}


@dataclass(frozen=True)
class Activation:
    """When registrations activate: a default delay and per-resource overrides."""

    activation_delay_s: float
    resource_delays: Mapping[str, float | None] = field(default_factory=dict)

    def activates_at(self, resource: str, created_at: float) -> float | None:
        if resource not in self.resource_delays:
            return created_at + self.activation_delay_s
        delay_s = self.resource_delays[resource]
        return None if delay_s is None else created_at + delay_s

    def updated(self, update: ConfigUpdate) -> Activation:
        delay_s = update.activation_delay_s
        return Activation(
            activation_delay_s=self.activation_delay_s if delay_s is None else delay_s,
            resource_delays={**self.resource_delays, **update.resource_delays},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "activation_delay_s": self.activation_delay_s,
            "resource_delays": dict(self.resource_delays),
        }


@dataclass
class Counters:
    registrations_created: int = 0
    entities_created: int = 0
    registrations_cancelled: int = 0
    requests: int = 0
    idempotent_replays: int = 0
    faults_injected: int = 0


@dataclass(frozen=True)
class Outcome:
    """A create's answer: the resource, and whether it was replayed under a known key."""

    body: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class _KeyRecord:
    fingerprint: str
    resource_id: str


def random_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


class ClientApiState:
    """Registrations and entities in memory; every public method is atomic."""

    def __init__(
        self, *, clock: Clock, activation: Activation, new_id: IdFactory = random_id
    ) -> None:
        self._clock = clock
        self._new_id = new_id
        self._initial_activation = activation
        self._lock = threading.Lock()
        self._activation = activation
        self._registrations: dict[str, Registration] = {}
        self._entities: dict[str, Entity] = {}
        self._keys: dict[tuple[str, str], _KeyRecord] = {}
        self._counters = Counters()

    def create_registration(self, key: str, resource: str) -> Outcome:
        fingerprint = _fingerprint({"resource": resource})
        with self._lock:
            now = self._clock()
            known = self._replayed_id(("registrations", key), fingerprint)
            if known is not None:
                return Outcome(self._registrations[known].to_json(now), replayed=True)
            if resource.startswith(REJECT_PREFIX):
                raise ApiError(422, "REJECTED", f"resource {resource!r} is not accepted")
            registration = Registration(
                id=self._new_id("reg"),
                resource=resource,
                created_at=now,
                activates_at=self._activation.activates_at(resource, now),
            )
            self._registrations[registration.id] = registration
            self._keys["registrations", key] = _KeyRecord(fingerprint, registration.id)
            self._counters.registrations_created += 1
            return Outcome(registration.to_json(now), replayed=False)

    def get_registration(self, registration_id: str) -> dict[str, Any]:
        with self._lock:
            return self._registration(registration_id).to_json(self._clock())

    def cancel_registration(self, registration_id: str) -> dict[str, Any]:
        """Compensation: idempotent, only the first cancel counts as a side effect."""
        with self._lock:
            registration = self._registration(registration_id)
            if not registration.cancelled:
                registration.cancelled = True
                self._counters.registrations_cancelled += 1
            return registration.to_json(self._clock())

    def create_entity(self, key: str, registration_id: str, name: str) -> Outcome:
        fingerprint = _fingerprint({"registration_id": registration_id, "name": name})
        with self._lock:
            known = self._replayed_id(("entities", key), fingerprint)
            if known is not None:
                return Outcome(self._entities[known].to_json(), replayed=True)
            self._require_active(self._registration(registration_id))
            entity = Entity(id=self._new_id("ent"), registration_id=registration_id, name=name)
            self._entities[entity.id] = entity
            self._keys["entities", key] = _KeyRecord(fingerprint, entity.id)
            self._counters.entities_created += 1
            return Outcome(entity.to_json(), replayed=False)

    def configure(self, update: ConfigUpdate) -> dict[str, Any]:
        with self._lock:
            self._activation = self._activation.updated(update)
            return self._activation.to_json()

    def count_request(self) -> None:
        with self._lock:
            self._counters.requests += 1

    def count_fault(self) -> None:
        with self._lock:
            self._counters.faults_injected += 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counters = asdict(self._counters)
        side_effects = ("registrations_created", "entities_created", "registrations_cancelled")
        return {
            "side_effects": {name: counters.pop(name) for name in side_effects},
            **counters,
        }

    def reset(self) -> None:
        """Forget everything, including config changes (back to the startup activation)."""
        with self._lock:
            self._activation = self._initial_activation
            self._registrations.clear()
            self._entities.clear()
            self._keys.clear()
            self._counters = Counters()

    def _registration(self, registration_id: str) -> Registration:
        registration = self._registrations.get(registration_id)
        if registration is None:
            raise ApiError(404, "NOT_FOUND", f"no registration {registration_id!r}")
        return registration

    def _require_active(self, registration: Registration) -> None:
        status = registration.status(self._clock())
        if status is not Status.ACTIVE:
            message = f"registration {registration.id!r} is {status.value}, not ACTIVE"
            raise ApiError(409, "NOT_ACTIVE", message)

    def _replayed_id(self, scope: tuple[str, str], fingerprint: str) -> str | None:
        """The id created earlier under this key, or None; 409 if the key came with another body."""
        record = self._keys.get(scope)
        if record is None:
            return None
        if record.fingerprint != fingerprint:
            raise ApiError(
                409, "IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was used with another body"
            )
        self._counters.idempotent_replays += 1
        return record.resource_id


def _fingerprint(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _rfc3339(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat().replace("+00:00", "Z")
