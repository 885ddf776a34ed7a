"""Fault injection: armed rules that make matching requests fail, answer slowly, or lose answers.

How rules combine (one request):
    The rules that match the request (method and path prefix) and have budget left are walked in
    the order they were armed. One random number ``u`` in [0, 1) is drawn for the request (only
    if some rule's probability is below 1), and rule *i* fires when ``u`` is below the sum of the
    probabilities of the matching rules walked so far, rule *i* included. The first rule that
    fires wins: it alone applies to the request, and only it spends budget.

    So probabilities of rules that match the same requests are **shares that add up**, not
    independent chances: rules of 0.20, 0.05, 0.10 and 0.05 fault 20 %, 5 %, 10 % and 5 % of
    the matching requests, 40 % in all, and 60 % pass untouched. A rule with probability 1
    takes every request that reaches it; if the shares sum to more than 1, the rules listed
    last get only what is left (nothing, past 1). A rule that has spent its ``count`` is gone,
    and the rules after it move up.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response, g, jsonify, request
from flask.typing import ResponseReturnValue

from relayflow.emulators.client_api.errors import ApiError
from relayflow.emulators.client_api.models import FaultRule

Random = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass
class _Armed:
    rule: FaultRule
    remaining: int | None  # None: never runs out


class FaultInjector:
    """Thread-safe list of armed fault rules; see the module docstring for how they combine."""

    def __init__(self, *, rand: Random = random.random) -> None:
        self._rand = rand
        self._lock = threading.Lock()
        self._armed: list[_Armed] = []

    def add(self, rules: Sequence[FaultRule]) -> None:
        with self._lock:
            self._armed.extend(_Armed(rule, rule.budget) for rule in rules)

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    def take(self, method: str, path: str) -> FaultRule | None:
        """The rule that applies to this request, its budget spent; None when none fires."""
        with self._lock:
            armed = self._pick([a for a in self._armed if a.rule.matches(method, path)])
            if armed is None:
                return None
            if armed.remaining is not None:
                armed.remaining -= 1
                if armed.remaining <= 0:
                    self._armed.remove(armed)
            return armed.rule

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{**a.rule.model_dump(), "remaining": a.remaining} for a in self._armed]

    def _pick(self, matching: list[_Armed]) -> _Armed | None:
        draw: float | None = None
        band = 0.0
        for armed in matching:
            band += armed.rule.probability
            if band >= 1.0:
                return armed  # certain: no need to draw
            if draw is None:
                draw = self._rand()
            if draw < band:
                return armed
        return None


@dataclass(frozen=True)
class FaultHooks:
    """What an app tells the fault hooks: which paths are its API, and whom to count with."""

    business_prefixes: tuple[str, ...]
    on_request: Callable[[], None]
    on_fault: Callable[[], None]


def install_faults(app: Flask, faults: FaultInjector, hooks: FaultHooks, sleep: Sleep) -> None:
    """Apply armed faults to the app's business routes (admin, stats, health are never faulted)."""

    @app.before_request
    def inject_before() -> ResponseReturnValue | None:
        rule = _take_fault(faults, hooks)
        if rule is None:
            return None
        if rule.delay_s:
            sleep(rule.delay_s)  # a slow answer is the fault itself, not a wait for something
        if rule.status is None:
            return None
        if rule.after_effect:
            g.fault_after = rule
            return None
        return fault_response(rule.status, rule.retry_after_s)

    @app.after_request
    def inject_after(response: Response) -> Response:
        rule: FaultRule | None = g.pop("fault_after", None)
        if rule is None or rule.status is None:
            return response
        return fault_response(rule.status, rule.retry_after_s)


def _take_fault(faults: FaultInjector, hooks: FaultHooks) -> FaultRule | None:
    if not request.path.startswith(hooks.business_prefixes):
        return None
    hooks.on_request()
    rule = faults.take(request.method, request.path)
    if rule is not None:
        hooks.on_fault()
    return rule


def fault_response(status: int, retry_after_s: float | None) -> Response:
    """The injected error answer, with ``Retry-After`` when the rule gives one."""
    response = jsonify(ApiError(status, "INJECTED_FAULT", f"injected {status}").body())
    response.status_code = status
    if retry_after_s is not None:
        # Whole numbers give a standard header; fractions keep fast tests fast.
        response.headers["Retry-After"] = format(retry_after_s, "g")
    return response
