"""relayflow.core.breaker_policy: dependencies' breaker policies as configured — parsed from
RELAYFLOW_DEPENDENCIES, checked where they are read, a dependency not named given the default —
and how long a breaker stays open and how its window is counted."""

from __future__ import annotations

import pytest

from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.errors import ConfigError
from relayflow.core.flows import ActionStep


def test_the_policy_is_checked_where_it_is_read() -> None:
    with pytest.raises(ConfigError, match="dependency names \\['Client API'\\] must match"):
        Dependencies.parse('{"dependencies": {"Client API": {}}}')
    with pytest.raises(ConfigError, match="failure_rate"):
        Dependencies.parse('{"default": {"failure_rate": 2}}')
    with pytest.raises(ConfigError, match="must match"):
        ActionStep("register", lambda ctx: {}, dependency="Client API")
    assert Dependencies.parse("").default.enabled
    assert not Dependencies.off().policy("anything").enabled


def test_an_open_breaker_stays_open_twice_as_long_each_time_up_to_its_cap() -> None:
    policy = BreakerPolicy(open_s=2.0, max_open_s=10.0)
    assert [policy.open_for_s(n) for n in (0, 1, 2, 3, 4)] == [2.0, 2.0, 4.0, 8.0, 10.0]
    # a cap below open_s does not shorten it
    assert BreakerPolicy(open_s=5.0, max_open_s=1.0).open_for_s(3) == 5.0


def test_a_window_is_counted_in_thirty_buckets_of_at_least_a_second() -> None:
    assert BreakerPolicy(window_s=300).bucket_s == 10.0
    assert BreakerPolicy(window_s=5).bucket_s == 1.0


def test_a_dependency_not_named_gets_the_default_policy() -> None:
    named = BreakerPolicy(min_calls=5)
    policies = Dependencies.parse(
        '{"default": {"min_calls": 50}, "dependencies": {"client-api": {"min_calls": 5}}}'
    )
    assert policies.policy("client-api") == named
    assert policies.policy("other-api") == BreakerPolicy(min_calls=50)
