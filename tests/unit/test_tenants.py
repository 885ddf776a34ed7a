"""relayflow.core.tenants: a tenant's policy (its limits, the rest a slot takes, its priority:
high takes its own queues, and a message cannot ask for more) and its metric label; the
policies parsed from ``RELAYFLOW_TENANTS``. Flows run through relayflow.testing's harness.

Admitting a limited tenant's flows is ``tests/unit/test_admission.py``'s; pausing and resuming
a tenant ``tests/unit/engine/test_tenancy.py``'s. Both run the job flow defined here.
"""

from __future__ import annotations

import pytest

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep, StepContext
from relayflow.core.errors import ConfigError
from relayflow.core.tenants import TenantPolicy, Tenants
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=10.0, multiplier=1.0, max_interval_s=10.0, jitter=0.0)


def ready_after_three(ctx: StepContext) -> dict[str, bool]:
    if ctx.poll < 2:
        raise NotReady("not yet")
    return {"ready": True}


def flow() -> Flow:
    return Flow(
        name="job",
        steps=(
            ActionStep("begin", scripted({"ok": True})),
            PollStep("wait", ready_after_three, policy=POLL),
        ),
    )


def policy(**kw: object) -> Tenants:
    return Tenants(tenants={"acme": TenantPolicy(**kw)})  # type: ignore[arg-type]


def test_every_flow_and_event_carries_its_tenant_and_high_priority_takes_its_own_queues() -> None:
    from relayflow.core.planner import QueueNames

    tenants = Tenants(tenants={"acme": TenantPolicy(priority="high")})
    h = Harness(flow(), tenants=tenants)
    h.engine._kernel.queues = QueueNames(steps_high="flow-steps-high", polls_high="flow-polls-high")
    urgent = h.start("job", tenant="acme")
    normal = h.start("job", tenant="acme", priority="low")  # a message may ask for less
    assert h.flow(urgent).tenant == "acme" and h.flow(urgent).priority == "high"
    assert h.flow(urgent).next is not None and h.flow(urgent).next.queue == "flow-steps-high"
    assert h.flow(normal).next is not None and h.flow(normal).next.queue == "flow-steps"
    h.run()
    assert {e["tenant"] for e in h.results()} == {"acme"}


def test_a_message_cannot_raise_its_priority_above_its_tenants_policy() -> None:
    from relayflow.core.planner import QueueNames

    h = Harness(flow(), tenants=Tenants(tenants={"acme": TenantPolicy(priority="low")}))
    h.engine._kernel.queues = QueueNames(steps_high="flow-steps-high", polls_high="flow-polls-high")
    pushy = h.start("job", tenant="acme", priority="high")
    assert h.flow(pushy).priority == "low"
    assert h.flow(pushy).next is not None and h.flow(pushy).next.queue == "flow-steps"


def test_metric_labels_name_configured_tenants_only() -> None:
    tenants = policy(max_running=1)
    assert [tenants.label(t) for t in ("acme", "default", "made-up-7")] == [
        "acme",
        "default",
        "other",
    ]


def test_a_slot_rests_long_enough_to_keep_starts_under_the_rate() -> None:
    assert TenantPolicy(max_running=4, starts_per_s=2.0).slot_cooldown_s == 2.0
    assert TenantPolicy(max_running=4).slot_cooldown_s == 0.0  # no rate: no rest
    assert TenantPolicy(starts_per_s=2.0).slot_cooldown_s == 0.0  # no slots to rest
    assert TenantPolicy(max_running=1).limited and not TenantPolicy().limited


def test_a_tenant_with_no_policy_of_its_own_gets_the_default() -> None:
    tenants = Tenants(default=TenantPolicy(max_running=3), tenants={"acme": TenantPolicy()})
    assert tenants.policy("acme") == TenantPolicy()
    assert tenants.policy("beta") == TenantPolicy(max_running=3)


def test_tenants_parse_from_their_json_and_nothing_is_no_policy() -> None:
    text = '{"default": {"max_running": 5}, "tenants": {"acme": {"priority": "high"}}}'
    parsed = Tenants.parse(text)
    assert parsed.default == TenantPolicy(max_running=5)
    assert parsed.policy("acme") == TenantPolicy(priority="high")
    assert Tenants.parse("  ") == Tenants()


@pytest.mark.parametrize(
    "text",
    ["{not json", '{"tenants": {"Acme!": {}}}', '{"tenants": {"acme": {"max_running": -1}}}'],
    ids=["not-json", "bad-name", "negative-limit"],
)
def test_an_invalid_tenants_policy_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="RELAYFLOW_TENANTS is not a valid tenants policy"):
        Tenants.parse(text)
