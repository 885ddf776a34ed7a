"""The ``orders`` flow: reserve stock, charge, get a shipping label, notify.

    reserve_stock   action  POST /inventory/reservations     undone by DELETE (release)
    charge_payment  action  POST /payments/charges           undone by a refund; 429 + Retry-After
    request_label   action  POST /shipping/labels            undone by DELETE (void)
    await_label     poll    GET /shipping/labels/{id}        until READY, its own poll policy
    notify          action  POST /notifications

Run it locally with ``relayflow local up --app orders.flows:build_registry`` from
``examples/orders``; test it with ``relayflow.testing`` (see ``tests/``).
"""

from __future__ import annotations

from typing import Any

import requests
from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from orders.api import OrdersApi
from relayflow import (
    ActionStep,
    Flow,
    NotReady,
    PermanentError,
    PollPolicy,
    PollStep,
    Registry,
    RetryPolicy,
    Settings,
    StepContext,
)

FLOW = "orders"


class OrdersConfig(BaseSettings):
    """The team's own settings, beside relayflow's: where the order dependencies are."""

    model_config = SettingsConfigDict(env_prefix="ORDERS_", frozen=True)

    api_url: str = "http://127.0.0.1:8130"
    timeout_s: float = Field(default=10.0, gt=0)


class OrderInput(BaseModel):
    """What an ``orders`` flow needs."""

    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(ge=1, le=1000)
    amount_cents: int = Field(ge=1)
    currency: str = Field(default="EUR", pattern=r"^[A-Z]{3}$")
    address: str = Field(min_length=1, max_length=500)


# The payment API asks callers to slow down with 429 + Retry-After; relayflow waits as long as
# it says (up to an hour), so the charge needs a generous number of attempts.
CHARGE_RETRY = RetryPolicy(max_attempts=8, initial_s=1.0, max_interval_s=30.0)
# Labels take seconds to minutes: poll every 2 s at first, at most every minute, for 2 hours.
LABEL_POLL = PollPolicy(
    initial_s=2.0, multiplier=2.0, max_interval_s=60.0, max_polls=200, deadline_s=7200.0
)


class OrderSteps:
    """The handlers, bound to one OrdersApi."""

    def __init__(self, api: OrdersApi) -> None:
        self._api = api

    def reserve_stock(self, ctx: StepContext) -> dict[str, Any]:
        order = ctx.input
        made = self._api.reserve(
            order["order_id"], order["sku"], int(order["quantity"]), key=ctx.idempotency_key
        )
        return {"reservation_id": made["id"]}

    def release_stock(self, ctx: StepContext) -> dict[str, Any]:
        done = ctx.outputs.get("reserve_stock") or self._replay(self.reserve_stock, ctx)
        return self._api.release(str(done["reservation_id"]))

    def charge_payment(self, ctx: StepContext) -> dict[str, Any]:
        order = ctx.input
        made = self._api.charge(
            order["order_id"],
            int(order["amount_cents"]),
            order.get("currency", "EUR"),
            key=ctx.idempotency_key,
        )
        return {"charge_id": made["id"]}

    def refund_payment(self, ctx: StepContext) -> dict[str, Any]:
        done = ctx.outputs.get("charge_payment") or self._replay(self.charge_payment, ctx)
        return self._api.refund(str(done["charge_id"]), key=ctx.idempotency_key)

    def request_label(self, ctx: StepContext) -> dict[str, Any]:
        made = self._api.request_label(
            ctx.input["order_id"], ctx.input["address"], key=ctx.idempotency_key
        )
        return {"label_id": made["id"]}

    def void_label(self, ctx: StepContext) -> dict[str, Any]:
        done = ctx.outputs.get("request_label") or self._replay(self.request_label, ctx)
        return self._api.void_label(str(done["label_id"]))

    def await_label(self, ctx: StepContext) -> dict[str, Any]:
        label_id = str(ctx.outputs["request_label"]["label_id"])
        status = str(self._api.label(label_id)["status"])
        if status == "READY":
            return {"label_id": label_id, "status": status}
        if status == "PENDING":
            raise NotReady(f"label {label_id} is {status}")
        raise PermanentError(f"label {label_id} is {status}", code=f"LABEL_{status}")

    def notify(self, ctx: StepContext) -> dict[str, Any]:
        label = ctx.outputs["await_label"]["label_id"]
        message = f"order {ctx.input['order_id']} ships with label {label}"
        made = self._api.notify(ctx.input["order_id"], message, key=ctx.idempotency_key)
        return {"notification_id": made["id"]}

    @staticmethod
    def _replay(action: Any, ctx: StepContext) -> dict[str, Any]:
        """An action whose responses were all lost, replayed under its own key: the API
        answers with the effect it made (or makes it now, to be undone at once)."""
        replayed: dict[str, Any] = action(
            StepContext(**{**ctx.__dict__, "idempotency_key": ctx.action_key})
        )
        return replayed


def orders_flow(api: OrdersApi) -> Flow:
    """The ``orders`` flow bound to ``api``."""
    steps = OrderSteps(api)
    return Flow(
        name=FLOW,
        version=1,
        description="Reserve stock, charge, get a shipping label, notify the customer.",
        input_model=OrderInput,
        steps=(
            ActionStep("reserve_stock", steps.reserve_stock, compensate=steps.release_stock),
            ActionStep(
                "charge_payment",
                steps.charge_payment,
                retry=CHARGE_RETRY,
                compensate=steps.refund_payment,
            ),
            ActionStep("request_label", steps.request_label, compensate=steps.void_label),
            PollStep("await_label", steps.await_label, policy=LABEL_POLL),
            ActionStep("notify", steps.notify),
        ),
    )


def build_registry(settings: Settings) -> Registry:
    """The app's flows: what ``RELAYFLOW_APP=orders.flows:build_registry`` loads."""
    config = OrdersConfig()
    api = OrdersApi(config.api_url, timeout_s=config.timeout_s, session=requests.Session())
    return Registry([orders_flow(api)])


def demo_batch(run: str, flows: int, settings: Settings) -> list[dict[str, Any]]:
    """``relayflow demo --app orders.flows:build_registry``: mostly orders that ship; every
    10th is out of stock (FAILED, nothing charged) and every 10th, offset, is declined (FAILED,
    stock released)."""
    bodies = []
    for i in range(flows):
        order_id = f"demo-{run}-{i:04d}"
        sku = f"oos-{i}" if i % 10 == 3 else f"sku-{i % 7}"
        amount = 402 if i % 10 == 7 else 1000 + i
        order = {"order_id": order_id, "sku": sku, "quantity": 1 + i % 3, "amount_cents": amount}
        bodies.append(
            {"flow": FLOW, "flow_id": order_id, "input": {**order, "address": f"{i} Main St"}}
        )
    return bodies
