"""The reference app: the flow ``registration``, written only against relayflow's public API
and loaded through ``RELAYFLOW_APP`` like any team's app (it is the default,
``relayflow.apps.registration:build_registry``).

    register            POST /registrations      (action; compensated by DELETE on failure)
    await_registration  GET /registrations/{id}  (poll until ACTIVE)
    create_entity       POST /entities           (action; compensated by DELETE /entities/{id})

Each external call carries the step's idempotency key, so a duplicate task never registers
twice.
"""

from __future__ import annotations

from typing import Any

import requests
from pydantic import BaseModel, ConfigDict, Field

from relayflow import (
    ActionStep,
    CallbackStep,
    Flow,
    ForEach,
    IfStep,
    NotReady,
    PermanentError,
    PollPolicy,
    PollStep,
    Registry,
    RetryPolicy,
    Settings,
    call_json,
)
from relayflow import StepContext as Ctx
from relayflow.apps.approval import approval_flow
from relayflow.apps.payment import payment_flow

FLOW_NAME = "registration"


class RegistrationInput(BaseModel):
    """What a ``registration`` flow needs: the resource to register (and an entity name)."""

    model_config = ConfigDict(extra="forbid")

    resource: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    entity_name: str | None = Field(default=None, min_length=1, max_length=200)


class ClientApi:
    """The external registration API, every failure classified by relayflow.http."""

    def __init__(self, base_url: str, *, timeout_s: float, session: requests.Session) -> None:
        self._base = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._session = session

    def _call(self, method: str, path: str, key: str | None = None, **kw: Any) -> Any:
        headers = {"Idempotency-Key": key} if key else {}
        url = f"{self._base}{path}"
        return call_json(
            self._session, method, url, timeout_s=self._timeout_s, headers=headers, **kw
        )

    def register(
        self,
        resource: str,
        *,
        key: str,
        callback_url: str | None = None,
        callback_token: str | None = None,
    ) -> dict[str, Any]:
        """Register ``resource``; with ``callback_url``, the API POSTs there when it is ACTIVE,
        sending ``callback_token`` back in a header (never in the URL: URLs get logged)."""
        callback = {"callback_url": callback_url, "callback_token": callback_token}
        body = {"resource": resource, **{k: v for k, v in callback.items() if v}}
        return dict(self._call("POST", "/registrations", key, json=body))

    def registration(self, registration_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/registrations/{registration_id}"))

    def cancel(self, registration_id: str, *, key: str) -> dict[str, Any]:
        return dict(self._call("DELETE", f"/registrations/{registration_id}", key))

    def create_entity(self, registration_id: str, name: str, *, key: str) -> dict[str, Any]:
        body = {"registration_id": registration_id, "name": name}
        return dict(self._call("POST", "/entities", key, json=body))

    def delete_entity(self, entity_id: str) -> dict[str, Any]:
        return dict(self._call("DELETE", f"/entities/{entity_id}"))

    def within(self, ctx: Ctx) -> ClientApi:
        """This client with its timeout cut to what is left of the handler's time budget, so
        a slow API cannot keep a handler past its dispatch deadline."""
        timeout_s = ctx.time_left_s(cap_s=self._timeout_s)
        return ClientApi(self._base, timeout_s=timeout_s, session=self._session)


class RegistrationSteps:
    """The handlers of the registration flow, bound to one ClientApi.

    A compensation whose action's responses were all lost (``ctx.outputs`` has nothing for
    it) replays the action under ``ctx.action_key``: the API answers with the effect it made
    (or makes it now, to be undone at once), so nothing is left behind either way.
    """

    def __init__(self, api: ClientApi) -> None:
        self._api = api

    def register(self, ctx: Ctx) -> dict[str, Any]:
        made = self._api.within(ctx).register(str(ctx.input["resource"]), key=ctx.idempotency_key)
        return {"registration_id": made["id"]}

    def unregister(self, ctx: Ctx) -> dict[str, Any]:
        api = self._api.within(ctx)
        done = ctx.outputs.get("register")
        if done is None:
            made = api.register(str(ctx.input["resource"]), key=ctx.action_key)
            done = {"registration_id": made["id"]}
        return api.cancel(str(done["registration_id"]), key=ctx.idempotency_key)

    def delete_entity(self, ctx: Ctx) -> dict[str, Any]:
        api = self._api.within(ctx)
        done = ctx.outputs.get("create_entity")
        if done is None:
            done = self._create(api, ctx, key=ctx.action_key)
        return api.delete_entity(str(done["entity_id"]))

    def await_active(self, ctx: Ctx) -> dict[str, Any]:
        reg_id = str(ctx.outputs["register"]["registration_id"])
        status = str(self._api.within(ctx).registration(reg_id)["status"])
        if status == "ACTIVE":
            return {"registration_id": reg_id, "status": status}
        if status == "PENDING":
            raise NotReady(f"registration {reg_id} is {status}")
        raise PermanentError(f"registration {reg_id} is {status}", code=f"REGISTRATION_{status}")

    def create_entity(self, ctx: Ctx) -> dict[str, Any]:
        return self._create(self._api.within(ctx), ctx, key=ctx.idempotency_key)

    @staticmethod
    def _create(api: ClientApi, ctx: Ctx, *, key: str) -> dict[str, Any]:
        reg_id = str(ctx.outputs["register"]["registration_id"])
        name = str(ctx.input.get("entity_name") or f"{ctx.input['resource']}-entity")
        made = api.create_entity(reg_id, name, key=key)
        return {"entity_id": made["id"], "registration_id": reg_id, "name": name}


# What the reference flows call: its breaker and retry budget guard every step that calls it.
CLIENT_API = "client-api"


def registration_flow(api: ClientApi, *, poll: PollPolicy, retry: RetryPolicy) -> Flow:
    """The reference flow, bound to ``api``."""
    steps = RegistrationSteps(api)
    return Flow(
        name=FLOW_NAME,
        description="Register a resource, wait until the registration is ACTIVE, create it.",
        input_model=RegistrationInput,
        steps=(
            ActionStep(
                "register",
                steps.register,
                retry=retry,
                compensate=steps.unregister,
                dependency=CLIENT_API,
            ),
            PollStep("await_registration", steps.await_active, policy=poll, dependency=CLIENT_API),
            ActionStep(
                "create_entity",
                steps.create_entity,
                retry=retry,
                compensate=steps.delete_entity,
                dependency=CLIENT_API,
            ),
        ),
    )


class FleetInput(BaseModel):
    """What a ``fleet`` flow needs: the resources to register, and how many must activate."""

    model_config = ConfigDict(extra="forbid")

    resources: list[str] = Field(min_length=1, max_length=1000)
    min_active: int = Field(default=1, ge=0)
    group: str = Field(default="fleet", min_length=1, max_length=100)


class FleetSteps:
    """The handlers of the ``fleet`` flow: every shape of flow, against the client API."""

    def __init__(self, api: ClientApi, *, callbacks_url: str) -> None:
        self._api = api
        # The client API calls back here when a registration is ACTIVE, with the step's token
        # apart from the URL: the api's POST /callbacks reads it from a header.
        self._callback_url = f"{callbacks_url.rstrip('/')}/callbacks"

    def register(self, ctx: Ctx) -> dict[str, Any]:
        made = self._api.within(ctx).register(
            str(ctx.item),
            key=ctx.idempotency_key,
            callback_url=self._callback_url,
            callback_token=ctx.callback_token,
        )
        return {"registration_id": made["id"]}

    def unregister(self, ctx: Ctx) -> dict[str, Any]:
        api = self._api.within(ctx)
        sent = ctx.outputs.get("activate")
        reg_id = sent.get("registration_id") if isinstance(sent, dict) else None
        if not reg_id:  # the run's responses were lost: replay it under its key to learn its id
            reg_id = api.register(
                str(ctx.item),
                key=ctx.action_key,
                callback_url=self._callback_url,
                callback_token=ctx.callback_token,
            )["id"]
        return api.cancel(str(reg_id), key=ctx.idempotency_key)

    def still_pending(self, ctx: Ctx) -> dict[str, Any]:
        """The safety net for a callback that never comes: the registration itself."""
        reg_id = str(ctx.outputs["activate"]["registration_id"])
        status = str(self._api.within(ctx).registration(reg_id)["status"])
        if status == "ACTIVE":
            return {
                "registration_id": reg_id,
                "resource": ctx.item,
                "status": status,
                "via": "poll",
            }
        if status == "PENDING":
            raise NotReady(f"registration {reg_id} is {status}")
        raise PermanentError(f"registration {reg_id} is {status}", code=f"REGISTRATION_{status}")

    @staticmethod
    def active(ctx: Ctx) -> list[str]:
        return [o["registration_id"] for o in ctx.outputs["register_all"]["items"] if o]

    def enough_active(self, ctx: Ctx) -> bool:
        return len(self.active(ctx)) >= int(ctx.input.get("min_active", 1))

    def create_group(self, ctx: Ctx) -> dict[str, Any]:
        first = self.active(ctx)[0]
        name = str(ctx.input.get("group") or "fleet")
        made = self._api.within(ctx).create_entity(first, name, key=ctx.idempotency_key)
        return {"entity_id": made["id"], "members": len(self.active(ctx))}

    def delete_group(self, ctx: Ctx) -> dict[str, Any]:
        done = ctx.outputs.get("create_group")
        if done is None:
            name = str(ctx.input.get("group") or "fleet")
            api = self._api.within(ctx)
            done = {
                "entity_id": api.create_entity(self.active(ctx)[0], name, key=ctx.action_key)["id"]
            }
        return self._api.within(ctx).delete_entity(str(done["entity_id"]))

    def shortfall(self, ctx: Ctx) -> dict[str, Any]:
        return {"active": len(self.active(ctx)), "wanted": int(ctx.input.get("min_active", 1))}

    def summarize(self, ctx: Ctx) -> dict[str, Any]:
        each = ctx.outputs["register_all"]
        return {
            "active": len(self.active(ctx)),
            "failed": each["failed"],
            "group": ctx.outputs.get("create_group"),
            "shortfall": ctx.outputs.get("report_shortfall"),
        }


def fleet_flow(api: ClientApi, *, callbacks_url: str, timeout_s: float, safety: PollPolicy) -> Flow:
    """Register many resources at once (ForEach, 10 at a time), each awaiting activation by
    callback with a slow poll as a safety net; then, if enough activated (If), group them in an
    entity, else report the shortfall; then summarize."""
    steps = FleetSteps(api, callbacks_url=callbacks_url)
    return Flow(
        name="fleet",
        description="Register resources in parallel, await each by callback, group them.",
        input_model=FleetInput,
        steps=(
            ForEach(
                "register_all",
                items=lambda ctx: list(ctx.input["resources"]),
                steps=(
                    CallbackStep(
                        "activate",
                        steps.register,
                        timeout_s=timeout_s,
                        check=steps.still_pending,
                        policy=safety,
                        compensate=steps.unregister,
                    ),
                ),
                concurrency=10,
                tolerate=1000,  # every failure is counted; the If decides what is enough
            ),
            IfStep(
                "enough",
                steps.enough_active,
                then=("create_group",),
                otherwise=("report_shortfall",),
            ),
            ActionStep(
                "create_group",
                steps.create_group,
                compensate=steps.delete_group,
                dependency=CLIENT_API,
            ),
            ActionStep("report_shortfall", steps.shortfall, after=("enough",)),
            ActionStep("summarize", steps.summarize, after=("create_group", "report_shortfall")),
        ),
    )


def build_registry(settings: Settings, session: requests.Session | None = None) -> Registry:
    """The flows this deployment runs, configured from settings."""
    api = ClientApi(
        str(settings.client_api_url),
        timeout_s=settings.client_api_timeout_s,
        session=session or requests.Session(),
    )
    poll = PollPolicy(
        initial_s=settings.poll_initial_s,
        multiplier=settings.poll_multiplier,
        max_interval_s=settings.poll_max_interval_s,
        jitter=settings.poll_jitter,
        max_polls=settings.poll_max_polls,
        deadline_s=settings.poll_deadline_s,
    )
    retry = RetryPolicy(
        max_attempts=settings.retry_max_attempts,
        initial_s=settings.retry_initial_s,
        max_interval_s=settings.retry_max_interval_s,
    )
    safety = PollPolicy(
        initial_s=settings.poll_max_interval_s,
        multiplier=2.0,
        max_interval_s=settings.poll_max_interval_s * 4,
        jitter=settings.poll_jitter,
        max_polls=settings.poll_max_polls,
        deadline_s=settings.poll_deadline_s,
    )
    fleet = fleet_flow(
        api,
        callbacks_url=str(settings.api_url),
        timeout_s=settings.poll_deadline_s,
        safety=safety,
    )
    flows = [registration_flow(api, poll=poll, retry=retry), fleet, approval_flow()]
    # Its card and token are sealed: run only where there is a keyset to seal them with (the
    # local stack makes one), so a deployment without one still starts.
    if settings.sensitive_keyset or settings.sensitive_keyset_file:
        flows.append(payment_flow(poll))
    return Registry(flows)


# -- the demo batch (``relayflow demo``) -------------------------------------------------------

DEMO_TIMEOUT_DEADLINE_S = 6.0


def demo_batch(run: str, flows: int, settings: Settings) -> list[dict[str, Any]]:
    """Mostly flows that succeed; every 12th is a business rejection (FAILED) and every 12th,
    offset, never activates (TIMED_OUT at a short deadline)."""
    bodies: list[dict[str, Any]] = []
    slow: list[str] = []
    for i in range(flows):
        body: dict[str, Any] = {"flow": FLOW_NAME, "flow_id": f"demo-{run}-{i:04d}"}
        if i % 12 == 5:
            body["input"] = {"resource": f"reject-{run}-{i}"}
        elif i % 12 == 11:
            slow.append(f"slow-{run}-{i}")
            body["input"] = {"resource": slow[-1]}
            body["deadline_s"] = DEMO_TIMEOUT_DEADLINE_S
        else:
            body["input"] = {"resource": f"acme-{run}-{i}"}
        bodies.append(body)
    # The fake client API's admin route: these resources never become ACTIVE.
    config = {"resource_delays": dict.fromkeys(slow)}
    url = f"{str(settings.client_api_url).rstrip('/')}/admin/config"
    requests.post(url, json=config, timeout=10).raise_for_status()
    return bodies
