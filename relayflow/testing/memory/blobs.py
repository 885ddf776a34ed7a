"""Objects of one bucket in a dict (``core.ports.Blobs``; the Cloud Storage one is
``gcp.blobs``): what the offload codec writes values too large for a flow document to."""

from __future__ import annotations

from relayflow.core.errors import PayloadUnavailable


class MemoryBlobs:
    """A bucket's objects by name, each written once (a second write of a name is a no-op,
    as Cloud Storage's ``ifGenerationMatch=0`` makes it)."""

    def __init__(self, bucket: str = "relayflow-payloads") -> None:
        self._bucket = bucket
        self.objects: dict[str, bytes] = {}
        self.writes = 0  # objects written (not the no-op repeats)
        self.failures_left = 0  # how many calls fail (unreachable) before they succeed again

    @property
    def bucket(self) -> str:
        return self._bucket

    def put(self, name: str, data: bytes) -> None:
        self._reachable()
        if name not in self.objects:
            self.objects[name] = bytes(data)
            self.writes += 1

    def get(self, bucket: str, name: str) -> bytes | None:
        self._reachable()
        return self.objects.get(name) if bucket == self._bucket else None

    def _reachable(self) -> None:
        if self.failures_left:
            self.failures_left -= 1
            raise PayloadUnavailable("the bucket is unreachable (a test said so)")
