"""The reference app's payment flow: a card is authorized, its settlement awaited, a receipt
made — with the card's number and code, and the token that stands for the card, sensitive.

    authorize  (action: a token for the card; its last four digits)
    settle     (poll: the settlement, simulated: ready on the third poll)
    receipt    (action: what the payment made, the token among it)

The card is marked in the input model (``Sensitive``), the token by path and in the output
model: each is sealed before it reaches Firestore, a task body or a result event, opened only
for these handlers, and shown ``[redacted]`` in the api, the console and the CLI to everyone
but ``RELAYFLOW_API_SENSITIVE_READERS`` (README, "Sensitive data"). Written only against
relayflow's public API, as any team's app would be.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep, Sensitive, StepContext

FLOW_NAME = "payment"
# The poll that finds the settlement done (the simulated processor's answer).
SETTLED_AT_POLL = 2


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid")

    number: Annotated[str, Sensitive] = Field(pattern=r"^[0-9]{12,19}$")
    cvc: Annotated[str, Sensitive] = Field(pattern=r"^[0-9]{3,4}$")


class PaymentInput(BaseModel):
    """What a ``payment`` flow needs: who pays, how much, with which card."""

    model_config = ConfigDict(extra="forbid")

    customer: str = Field(min_length=1, max_length=200)
    amount_cents: int = Field(gt=0)
    card: Card


class Receipt(BaseModel):
    """What a payment made: the card's last four digits in clear, its token sealed."""

    customer: str
    amount_cents: int
    last4: str
    token: Annotated[str, Sensitive]


def authorize(ctx: StepContext) -> dict[str, Any]:
    """A token for the card, the same for every try (keyed by the step's idempotency key)."""
    card = ctx.input_as(PaymentInput).card
    digest = hmac.new(ctx.idempotency_key.encode(), card.number.encode(), hashlib.sha256)
    return {"token": f"tok_{digest.hexdigest()[:24]}", "last4": card.number[-4:]}


def settle(ctx: StepContext) -> dict[str, Any]:
    """The processor's settlement of the token. Its not-ready detail names the token, as a
    processor's status message may: relayflow scrubs it from the history and the poll
    chain's task bodies (it was opened for this handler)."""
    token = ctx.outputs["authorize"]["token"]
    if ctx.poll < SETTLED_AT_POLL:
        raise NotReady(f"settlement of {token} pending")
    return {"settled": True}


def receipt(ctx: StepContext) -> dict[str, Any]:
    payment = ctx.input_as(PaymentInput)
    authorized = ctx.outputs["authorize"]
    return Receipt(
        customer=payment.customer,
        amount_cents=payment.amount_cents,
        last4=authorized["last4"],
        token=authorized["token"],
    ).model_dump()


def payment_flow(poll: PollPolicy | None = None) -> Flow:
    return Flow(
        name=FLOW_NAME,
        description="a card payment whose card and token are sealed (sensitive fields)",
        steps=(
            ActionStep("authorize", authorize),
            PollStep("settle", settle, policy=poll or PollPolicy()),
            ActionStep("receipt", receipt),
        ),
        input_model=PaymentInput,
        output_model=Receipt,
        sensitive=("outputs.authorize.token",),
    )
