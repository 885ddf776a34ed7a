"""Which tenant a start message's topic belongs to (issue 18): the start function takes the
tenant from the CloudEvent's source, never from the message."""

from __future__ import annotations

import pytest

from relayflow.topology import (
    load_topology,
    tenant_of_topic,
    topic_of_source,
    topic_of_subscription,
)

SOURCE = "//pubsub.googleapis.com/projects/relayflow-local/topics/"


@pytest.mark.parametrize(
    ("source", "tenant"),
    [
        (SOURCE + "flow-requests.acme", "acme"),
        (SOURCE + "flow-requests", "default"),
        (SOURCE + "flow-requests-dead", "default"),  # not a tenant's topic
        (SOURCE + "flow-requests.Not_A_Tenant", "default"),
        (SOURCE, "default"),
        ("", "default"),
        (None, "default"),
        ("//pubsub.googleapis.com/topics/flow-requests.acme", "default"),  # no project
    ],
)
def test_the_tenant_comes_from_the_topic_in_the_source(source: str | None, tenant: str) -> None:
    assert tenant_of_topic(load_topology(), topic_of_source(source)) == tenant


def test_a_tenants_topic_and_subscription_names_round_trip() -> None:
    names = load_topology().tenant_requests
    assert names.topic_of("acme") == "flow-requests.acme"
    assert names.subscription_of("acme") == "flow-requests.acme.start"
    assert names.tenant_of(names.topic_of("a-1")) == "a-1"


@pytest.mark.parametrize(
    ("subscription", "topic"),
    [
        ("flow-requests-start", "flow-requests"),
        ("flow-signals-api", "flow-signals"),  # a dead signal goes back to flow-signals
        ("flow-requests.acme.start", "flow-requests.acme"),
        ("flow-requests..start", None),
        ("flow-requests.Not_A_Tenant.start", None),
        ("someone-elses", None),
    ],
)
def test_a_dead_letter_goes_back_to_the_topic_of_the_subscription_that_gave_it_up(
    subscription: str, topic: str | None
) -> None:
    assert topic_of_subscription(load_topology(), subscription) == topic
