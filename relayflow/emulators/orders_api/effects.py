"""The side effects the fake order dependencies perform, and the ledger that keeps them.

Every dependency does the same few things: create an effect under an Idempotency-Key, read it,
and (for most) undo it once, idempotently. A ``Kind`` names one effect family and its statuses;
the ``EffectLedger`` keeps all of them behind one lock, so two retries of one request that
arrive at once still make one effect, and counts what it did for ``/stats``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from relayflow.emulators.client_api.errors import ApiError
from relayflow.emulators.client_api.idempotency import IdempotencyKeys, Outcome
from relayflow.emulators.client_api.state import random_id, rfc3339
from relayflow.emulators.orders_api.rules import OrdersConfig

Clock = Callable[[], float]
IdFactory = Callable[[str], str]


@dataclass(frozen=True)
class Kind:
    """One family of effects: its names, its statuses, and whether it can be undone."""

    plural: str  # idempotency scope and key under live.orders in /stats
    id_prefix: str
    created: str  # side-effect counter of a create
    live: str  # counter of effects live now
    done_status: str
    undone: str | None = None  # side-effect counter of an undo; None: cannot be undone
    undone_status: str | None = None
    pending_status: str | None = None  # PENDING until ready (shipping labels)


RESERVATIONS = Kind(
    "reservations", "res", "reservations_created", "reservations_held", "HELD",
    "reservations_released", "RELEASED",
)  # fmt: skip
CHARGES = Kind(
    "charges", "ch", "charges_created", "charges_not_refunded", "SUCCEEDED",
    "charges_refunded", "REFUNDED",
)  # fmt: skip
LABELS = Kind(
    "labels", "lbl", "labels_created", "labels_not_voided", "READY",
    "labels_voided", "VOIDED", pending_status="PENDING",
)  # fmt: skip
NOTIFICATIONS = Kind("notifications", "ntf", "notifications_sent", "notifications_sent", "SENT")
KINDS = (RESERVATIONS, CHARGES, LABELS, NOTIFICATIONS)


@dataclass
class Effect:
    id: str
    kind: Kind
    order_id: str
    attrs: Mapping[str, Any]  # the create's body
    created_at: float
    # When a pending effect becomes done; None: never (a label that is never ready).
    ready_at: float | None = None
    undone: bool = False

    def status(self, now: float) -> str:
        kind = self.kind
        if self.undone and kind.undone_status:
            return kind.undone_status
        if kind.pending_status and (self.ready_at is None or now < self.ready_at):
            return kind.pending_status
        return kind.done_status

    def to_json(self, now: float) -> dict[str, Any]:
        body = {
            "id": self.id,
            **self.attrs,
            "status": self.status(now),
            "created_at": rfc3339(self.created_at),
        }
        if self.kind.pending_status and body["status"] == self.kind.done_status:
            body["tracking_number"] = f"TRK{self.id[-12:].upper()}"
        return body


@dataclass
class _Counters:
    values: dict[str, int] = field(default_factory=dict)

    def add(self, name: str) -> None:
        self.values[name] = self.values.get(name, 0) + 1


_SIDE_EFFECTS = tuple(
    dict.fromkeys(name for k in KINDS for name in (k.created, k.undone) if name is not None)
)
_OTHER_COUNTERS = (
    "requests",
    "idempotent_replays",
    "faults_injected",
    "business_rejections",
    "payments_rate_limited",
)


class EffectLedger:
    """Every effect of every dependency, the config, and the counters; each method is atomic."""

    def __init__(self, *, clock: Clock, config: OrdersConfig, new_id: IdFactory = random_id):
        self._clock = clock
        self._new_id = new_id
        self._initial_config = config
        self._lock = threading.Lock()
        self._config = config
        self._effects: dict[str, dict[str, Effect]] = {k.plural: {} for k in KINDS}
        self._keys = IdempotencyKeys()
        self._counters = _Counters()

    @property
    def config(self) -> OrdersConfig:
        with self._lock:
            return self._config

    def create(self, kind: Kind, key: str, body: Mapping[str, Any]) -> Outcome:
        """A new effect, or the one this key made before (409 if it came with another body)."""
        with self._lock:
            now = self._clock()
            known = self._keys.known_id(kind.plural, key, body)
            if known is not None:
                self._counters.add("idempotent_replays")
                return Outcome(self._effects[kind.plural][known].to_json(now), replayed=True)
            effect = self._new_effect(kind, body, now)
            self._effects[kind.plural][effect.id] = effect
            self._keys.remember(kind.plural, key, body, effect.id)
            self._counters.add(kind.created)
            return Outcome(effect.to_json(now), replayed=False)

    def get(self, kind: Kind, effect_id: str) -> dict[str, Any]:
        with self._lock:
            return self._effect(kind, effect_id).to_json(self._clock())

    def undo(self, kind: Kind, effect_id: str) -> dict[str, Any]:
        """Release, refund or void: idempotent, only the first undo counts as a side effect."""
        if kind.undone is None:
            raise ValueError(f"{kind.plural} cannot be undone")
        with self._lock:
            effect = self._effect(kind, effect_id)
            if not effect.undone:
                effect.undone = True
                self._counters.add(kind.undone)
            return effect.to_json(self._clock())

    def configure(self, change: Callable[[OrdersConfig], OrdersConfig]) -> OrdersConfig:
        with self._lock:
            self._config = change(self._config)
            return self._config

    def count(self, name: str) -> None:
        with self._lock:
            self._counters.add(name)

    def stats(self, *, detail: bool = False) -> dict[str, Any]:
        with self._lock:
            counters = self._counters.values
            live = self._live(detail)
            return {
                "side_effects": {name: counters.get(name, 0) for name in _SIDE_EFFECTS},
                **{name: counters.get(name, 0) for name in _OTHER_COUNTERS},
                "live": live,
            }

    def reset(self) -> None:
        """Forget every effect, key and count, and go back to the start-up config."""
        with self._lock:
            self._config = self._initial_config
            for effects in self._effects.values():
                effects.clear()
            self._keys.clear()
            self._counters = _Counters()

    def _new_effect(self, kind: Kind, body: Mapping[str, Any], now: float) -> Effect:
        order_id = str(body["order_id"])
        ready_at = self._config.label_ready_at(order_id, now) if kind.pending_status else None
        return Effect(
            id=self._new_id(kind.id_prefix),
            kind=kind,
            order_id=order_id,
            attrs=dict(body),
            created_at=now,
            ready_at=ready_at,
        )

    def _effect(self, kind: Kind, effect_id: str) -> Effect:
        effect = self._effects[kind.plural].get(effect_id)
        if effect is None:
            raise ApiError(404, "NOT_FOUND", f"no {kind.plural[:-1]} {effect_id!r}")
        return effect

    def _live(self, detail: bool) -> dict[str, Any]:
        live: dict[str, Any] = {}
        orders: dict[str, dict[str, list[str]]] = {}
        for kind in KINDS:
            effects = [e for e in self._effects[kind.plural].values() if not e.undone]
            live[kind.live] = len(effects)
            for effect in effects:
                orders.setdefault(effect.order_id, {}).setdefault(kind.plural, []).append(effect.id)
        if detail:
            live["orders"] = orders
        return live
