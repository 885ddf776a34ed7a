"""Fixed local ports, as offsets from a base (default 8120): base + 1 .. base + 11.

Moving the base moves the whole block, so a test stack can run beside a demo.
"""

from __future__ import annotations

from dataclasses import dataclass

from relayflow.local.names import DEFAULT_BASE_PORT

HOST = "127.0.0.1"
__all__ = ["DEFAULT_BASE_PORT", "HOST", "Ports"]


@dataclass(frozen=True)
class Ports:
    """Every port of the local stack, derived from one base port."""

    base: int = DEFAULT_BASE_PORT

    @property
    def pubsub(self) -> int:
        return self.base + 1

    @property
    def firestore(self) -> int:
        return self.base + 2

    @property
    def cloud_tasks_grpc(self) -> int:
        return self.base + 3

    @property
    def cloud_tasks_rest(self) -> int:
        return self.base + 4

    @property
    def client_api(self) -> int:
        return self.base + 5

    @property
    def start_function(self) -> int:
        return self.base + 6

    @property
    def worker(self) -> int:
        return self.base + 7

    @property
    def poller(self) -> int:
        return self.base + 8

    @property
    def api(self) -> int:
        return self.base + 9

    @property
    def orders_api(self) -> int:
        """The example app's fake dependencies (examples/orders)."""
        return self.base + 10

    @property
    def storage(self) -> int:
        """The Cloud Storage emulator (gcp-storage-emulator): the offload bucket."""
        return self.base + 11
