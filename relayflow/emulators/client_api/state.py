"""The fake client API's state: registrations, entities, idempotency records and counters.

All of it sits behind one lock, so a check-then-create under an idempotency key is atomic even
when two retries of the same request arrive at once. Time comes from an injected clock (epoch
seconds), so activation is computed on read and tests never sleep. Activation callbacks are
queued in an outbox when a registration is created; ``callbacks.CallbackDispatcher`` sends them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from relayflow.emulators.client_api.callbacks import CALLBACK_TOKEN_HEADER, Outbox
from relayflow.emulators.client_api.errors import ApiError
from relayflow.emulators.client_api.idempotency import IdempotencyKeys, Outcome
from relayflow.emulators.client_api.models import CallbackMode, ConfigUpdate

Clock = Callable[[], float]
IdFactory = Callable[[str], str]

REJECT_PREFIX = "reject-"
DEFAULT_CALLBACK_LATE_S = 5.0


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
    callback_url: str | None = None
    callback_token: str | None = None  # sent with each callback, never shown
    cancelled_at: float | None = None

    def status(self, now: float) -> Status:
        if self.cancelled_at is not None:
            return Status.CANCELLED
        if self.activates_at is not None and now >= self.activates_at:
            return Status.ACTIVE
        return Status.PENDING

    @property
    def ever_active(self) -> bool:
        """Whether it became ACTIVE at some point (a cancel may have ended that since)."""
        if self.activates_at is None:
            return False
        return self.cancelled_at is None or self.cancelled_at >= self.activates_at

    def to_json(self, now: float) -> dict[str, Any]:
        body = {
            "id": self.id,
            "resource": self.resource,
            "status": self.status(now).value,
            "created_at": rfc3339(self.created_at),
        }
        if self.callback_url is not None:
            body["callback_url"] = self.callback_url
        return body


@dataclass
class Entity:
    id: str
    registration_id: str
    name: str
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "registration_id": self.registration_id,
            "name": self.name,
            "deleted": self.deleted,
        }


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


@dataclass(frozen=True)
class CallbackPolicy:
    """How activations are reported to callback URLs: a mode per resource, and how late."""

    default_mode: CallbackMode = CallbackMode.ON_TIME
    modes: Mapping[str, CallbackMode] = field(default_factory=dict)
    late_s: float = DEFAULT_CALLBACK_LATE_S

    def due_times(self, resource: str, activates_at: float) -> list[float]:
        """When to send the callbacks of a registration that activates at ``activates_at``."""
        late = activates_at + self.late_s
        return {
            CallbackMode.ON_TIME: [activates_at],
            CallbackMode.LATE: [late],
            CallbackMode.TWICE: [activates_at, late],
            CallbackMode.NEVER: [],
        }[self.modes.get(resource, self.default_mode)]

    def updated(self, update: ConfigUpdate) -> CallbackPolicy:
        return CallbackPolicy(
            default_mode=update.callback_default_mode or self.default_mode,
            modes={**self.modes, **update.callback_modes},
            late_s=self.late_s if update.callback_late_s is None else update.callback_late_s,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "callback_default_mode": self.default_mode.value,
            "callback_modes": {k: v.value for k, v in self.modes.items()},
            "callback_late_s": self.late_s,
        }


@dataclass
class Counters:
    registrations_created: int = 0
    entities_created: int = 0
    registrations_cancelled: int = 0
    entities_deleted: int = 0
    requests: int = 0
    idempotent_replays: int = 0
    faults_injected: int = 0
    callbacks_sent: int = 0
    callbacks_failed: int = 0


SIDE_EFFECTS = (
    "registrations_created",
    "entities_created",
    "registrations_cancelled",
    "entities_deleted",
)


def random_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


class ClientApiState:
    """Registrations and entities in memory; every public method is atomic."""

    def __init__(
        self,
        *,
        clock: Clock,
        activation: Activation,
        outbox: Outbox | None = None,
        new_id: IdFactory = random_id,
    ) -> None:
        self._clock = clock
        self._new_id = new_id
        self.outbox = outbox or Outbox()
        self._initial_activation = activation
        self._lock = threading.Lock()
        self._activation = activation
        self._callbacks = CallbackPolicy()
        self._registrations: dict[str, Registration] = {}
        self._entities: dict[str, Entity] = {}
        self._keys = IdempotencyKeys()
        self._counters = Counters()

    # ---- registrations ------------------------------------------------------------------

    def create_registration(
        self,
        key: str,
        resource: str,
        callback_url: str | None,
        *,
        callback_token: str | None = None,
    ) -> Outcome:
        body = {
            "resource": resource,
            "callback_url": callback_url,
            "callback_token": callback_token,
        }
        with self._lock:
            now = self._clock()
            known = self._known_id("registrations", key, body)
            if known is not None:
                return Outcome(self._registrations[known].to_json(now), replayed=True)
            if resource.startswith(REJECT_PREFIX):
                raise ApiError(422, "REJECTED", f"resource {resource!r} is not accepted")
            registration = Registration(
                id=self._new_id("reg"),
                resource=resource,
                created_at=now,
                activates_at=self._activation.activates_at(resource, now),
                callback_url=callback_url,
                callback_token=callback_token,
            )
            self._registrations[registration.id] = registration
            self._keys.remember("registrations", key, body, registration.id)
            self._counters.registrations_created += 1
            self._queue_callbacks(registration)
            return Outcome(registration.to_json(now), replayed=False)

    def get_registration(self, registration_id: str) -> dict[str, Any]:
        with self._lock:
            return self._registration(registration_id).to_json(self._clock())

    def cancel_registration(self, registration_id: str) -> dict[str, Any]:
        """Compensation: idempotent, only the first cancel counts as a side effect."""
        with self._lock:
            now = self._clock()
            registration = self._registration(registration_id)
            if registration.cancelled_at is None:
                registration.cancelled_at = now
                self._counters.registrations_cancelled += 1
            return registration.to_json(now)

    # ---- entities -----------------------------------------------------------------------

    def create_entity(self, key: str, registration_id: str, name: str) -> Outcome:
        body = {"registration_id": registration_id, "name": name}
        with self._lock:
            known = self._known_id("entities", key, body)
            if known is not None:
                return Outcome(self._entities[known].to_json(), replayed=True)
            self._require_active(self._registration(registration_id))
            entity = Entity(id=self._new_id("ent"), registration_id=registration_id, name=name)
            self._entities[entity.id] = entity
            self._keys.remember("entities", key, body, entity.id)
            self._counters.entities_created += 1
            return Outcome(entity.to_json(), replayed=False)

    def get_entity(self, entity_id: str) -> dict[str, Any]:
        with self._lock:
            return self._entity(entity_id).to_json()

    def delete_entity(self, entity_id: str) -> dict[str, Any]:
        """Compensation of create_entity: idempotent, only the first delete counts."""
        with self._lock:
            entity = self._entity(entity_id)
            if not entity.deleted:
                entity.deleted = True
                self._counters.entities_deleted += 1
            return entity.to_json()

    # ---- callbacks (the CallbackLedger the dispatcher reports to) -----------------------

    def callback_wanted(self, registration_id: str) -> bool:
        with self._lock:
            registration = self._registrations.get(registration_id)
            return registration is not None and registration.ever_active

    def count_callback(self, *, sent: bool) -> None:
        with self._lock:
            if sent:
                self._counters.callbacks_sent += 1
            else:
                self._counters.callbacks_failed += 1

    # ---- admin --------------------------------------------------------------------------

    def configure(self, update: ConfigUpdate) -> dict[str, Any]:
        with self._lock:
            self._activation = self._activation.updated(update)
            self._callbacks = self._callbacks.updated(update)
            return {**self._activation.to_json(), **self._callbacks.to_json()}

    def count_request(self) -> None:
        with self._lock:
            self._counters.requests += 1

    def count_fault(self) -> None:
        with self._lock:
            self._counters.faults_injected += 1

    def stats(self, *, detail: bool = False) -> dict[str, Any]:
        """Counters, with side effects apart, and what is live now (ids too with ``detail``)."""
        with self._lock:
            counters = asdict(self._counters)
            live = self._live(detail)
            pending = len(self.outbox)
        return {
            "side_effects": {name: counters.pop(name) for name in SIDE_EFFECTS},
            **counters,
            "callbacks_pending": pending,
            "live": live,
        }

    def reset(self) -> None:
        """Forget everything, including config changes (back to the startup activation)."""
        with self._lock:
            self._activation = self._initial_activation
            self._callbacks = CallbackPolicy()
            self._registrations.clear()
            self._entities.clear()
            self._keys.clear()
            self._counters = Counters()
            self.outbox.clear()

    # ---- helpers (called with the lock held) --------------------------------------------

    def _queue_callbacks(self, registration: Registration) -> None:
        if registration.callback_url is None or registration.activates_at is None:
            return
        activates_at = registration.activates_at
        body = {
            "registration_id": registration.id,
            "resource": registration.resource,
            "status": Status.ACTIVE.value,
            "activated_at": rfc3339(activates_at),
        }
        token = registration.callback_token
        headers = {CALLBACK_TOKEN_HEADER: token} if token else {}
        for due in self._callbacks.due_times(registration.resource, activates_at):
            self.outbox.put(
                due=due,
                registration_id=registration.id,
                url=registration.callback_url,
                body=body,
                headers=headers,
            )

    def _live(self, detail: bool) -> dict[str, Any]:
        registrations = [r for r in self._registrations.values() if r.cancelled_at is None]
        entities = [e for e in self._entities.values() if not e.deleted]
        live: dict[str, Any] = {"registrations": len(registrations), "entities": len(entities)}
        if detail:
            live["registrations_by_resource"] = _group((r.resource, r.id) for r in registrations)
            live["entities_by_registration"] = _group((e.registration_id, e.id) for e in entities)
        return live

    def _known_id(self, scope: str, key: str, body: Mapping[str, Any]) -> str | None:
        known = self._keys.known_id(scope, key, body)
        if known is not None:
            self._counters.idempotent_replays += 1
        return known

    def _registration(self, registration_id: str) -> Registration:
        registration = self._registrations.get(registration_id)
        if registration is None:
            raise ApiError(404, "NOT_FOUND", f"no registration {registration_id!r}")
        return registration

    def _entity(self, entity_id: str) -> Entity:
        entity = self._entities.get(entity_id)
        if entity is None:
            raise ApiError(404, "NOT_FOUND", f"no entity {entity_id!r}")
        return entity

    def _require_active(self, registration: Registration) -> None:
        status = registration.status(self._clock())
        if status is not Status.ACTIVE:
            message = f"registration {registration.id!r} is {status.value}, not ACTIVE"
            raise ApiError(409, "NOT_ACTIVE", message)


def _group(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """{key: [values in creation order]}."""
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return grouped


def rfc3339(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat().replace("+00:00", "Z")
