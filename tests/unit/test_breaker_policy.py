"""Dependencies' breaker policies as configured: parsed from RELAYFLOW_DEPENDENCIES, checked
where they are read."""

from __future__ import annotations

import pytest

from relayflow.core.breaker_policy import Dependencies
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
