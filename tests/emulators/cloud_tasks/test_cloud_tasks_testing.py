"""The test helpers' own promises: ports handed out together never collide."""

from __future__ import annotations

from relayflow.emulators.cloud_tasks.testing import free_ports


def test_ports_picked_together_are_distinct() -> None:
    for _ in range(200):  # released one at a time, two draws once gave one port twice (CI)
        ports = free_ports(3)
        assert len(set(ports)) == 3
