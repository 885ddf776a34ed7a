"""Payload objects in Cloud Storage (``core.ports.Blobs``), through google-cloud-storage.

The client honours ``STORAGE_EMULATOR_HOST`` itself (the local stack's gcp-storage-emulator),
with anonymous credentials there. A write names ``ifGenerationMatch=0``: Cloud Storage creates
the object only if it does not exist (a 412 means it does, with the same content: the name is
its hash), so a repeat never rewrites it or resets its age. Cloud Storage takes about one
write per second to one object name
(https://cloud.google.com/storage/quotas#objects), which content names within one flow never
come near but for identical outputs of many items; those are written once per instance
(``core.payloads``' cache of names written) and answered 412 after that.
"""

from __future__ import annotations

import os
import threading

from google.api_core.exceptions import (
    GoogleAPICallError,
    NotFound,
    PreconditionFailed,
    RetryError,
)
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage  # type: ignore[attr-defined]  # untyped: no py.typed

from relayflow.core.errors import PayloadUnavailable
from relayflow.telemetry import Counters

EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"
# Each call is bounded, as the store's are: a handler answers inside its dispatch deadline.
TIMEOUT_S = 60.0


def build_client(project: str) -> storage.Client:
    """A Cloud Storage client; on the emulator (``STORAGE_EMULATOR_HOST``), anonymous."""
    if os.environ.get(EMULATOR_VARIABLE):
        anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
        return storage.Client(project=project, credentials=anonymous)
    return storage.Client(project=project)


class GcsBlobs:
    """One bucket's objects: what values too large for a flow document are written to."""

    def __init__(
        self,
        bucket: str,
        *,
        project: str,
        client: storage.Client | None = None,
        counters: Counters | None = None,
    ) -> None:
        """``client``: None builds one on first use (so a process that never offloads never
        looks for credentials)."""
        self._bucket = bucket
        self._project = project
        self._made = client
        self._lock = threading.Lock()
        self._counters = counters or Counters()

    @property
    def _client(self) -> storage.Client:
        with self._lock:
            if self._made is None:
                self._made = build_client(self._project)
            return self._made

    @property
    def bucket(self) -> str:
        return self._bucket

    def put(self, name: str, data: bytes) -> None:
        blob = self._client.bucket(self._bucket).blob(name)
        self._counters.add("storage_writes")
        try:
            blob.upload_from_string(
                data, content_type="application/json", if_generation_match=0, timeout=TIMEOUT_S
            )
        except PreconditionFailed:
            return  # written already: its name is its content's hash
        except (GoogleAPICallError, RetryError, OSError) as exc:
            raise PayloadUnavailable(f"cannot write gs://{self._bucket}/{name}: {exc}") from exc
        self._counters.add("storage_bytes_written", len(data))

    def get(self, bucket: str, name: str) -> bytes | None:
        blob = self._client.bucket(bucket).blob(name)
        self._counters.add("storage_reads")
        try:
            data: bytes = blob.download_as_bytes(timeout=TIMEOUT_S)
        except NotFound:
            return None
        except (GoogleAPICallError, RetryError, OSError) as exc:
            raise PayloadUnavailable(f"cannot read gs://{bucket}/{name}: {exc}") from exc
        return data

    def delete(self, name: str) -> None:
        """Delete an object (tests and the local stack's clean-up; the cloud's bucket deletes
        by its lifecycle rule)."""
        try:
            self._client.bucket(self._bucket).blob(name).delete(timeout=TIMEOUT_S)
        except NotFound:
            return
