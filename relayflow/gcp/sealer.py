"""The sealer of flows' sensitive fields (``core.sealing.Sealer``): Tink's deterministic AEAD
(AES-SIV) under a keyset, the keyset itself encrypted by a Cloud KMS key in the cloud.

Envelope encryption: the keyset (the data key) is stored encrypted by the KMS key (the key
encryption key) and decrypted once, when the process starts; every value is then sealed and
opened locally. A KMS call per value would put every step of every flow on Cloud KMS's request
quota and latency (https://cloud.google.com/kms/quotas: cryptographic requests per minute, per
project and region); one per process start does not. Locally (the local stack, tests) the
keyset is a cleartext file ``relayflow local up`` makes in its state dir.

Settings: ``RELAYFLOW_SENSITIVE_KEYSET`` (the keyset's JSON) or
``RELAYFLOW_SENSITIVE_KEYSET_FILE`` (a file holding it), and ``RELAYFLOW_SENSITIVE_KEY_URI``
(``gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K``) when it is encrypted — as
``tinkey create-keyset --key-template AES256_SIV --out-format json --master-key-uri URI`` or
``relayflow keys create --kms-key-uri URI`` write it. Rotation is Tink's: add a key to the
keyset and make it primary; values sealed under the old key still open while it is there.

Tink is imported only by a process that has a keyset to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relayflow.core.errors import ConfigError
from relayflow.settings import Settings

# What an encrypted keyset was encrypted with besides the KMS key: nothing, as tinkey does.
KEYSET_ASSOCIATED_DATA = b""
KMS_PREFIX = "gcp-kms://"


class TinkSealer:
    """``core.sealing.Sealer`` over a Tink deterministic AEAD primitive."""

    def __init__(self, primitive: Any) -> None:
        self._daead = primitive

    def seal(self, plaintext: bytes, associated_data: bytes) -> bytes:
        sealed: bytes = self._daead.encrypt_deterministically(plaintext, associated_data)
        return sealed

    def open(self, ciphertext: bytes, associated_data: bytes) -> bytes:
        opened: bytes = self._daead.decrypt_deterministically(ciphertext, associated_data)
        return opened

    @classmethod
    def from_keyset(cls, keyset: str, *, key_uri: str | None = None) -> TinkSealer:
        """The sealer of a keyset as JSON: cleartext, or encrypted by the Cloud KMS key
        ``key_uri``. ConfigError saying why if it cannot be read."""
        import tink
        from tink import daead, secret_key_access

        daead.register()
        try:
            if key_uri is None:
                handle = tink.json_proto_keyset_format.parse(keyset, secret_key_access.TOKEN)
            else:
                handle = tink.json_proto_keyset_format.parse_encrypted(
                    keyset, kms_aead(key_uri), KEYSET_ASSOCIATED_DATA
                )
            return cls(handle.primitive(daead.DeterministicAead))
        except tink.TinkError as exc:
            encrypted = f"encrypted by {key_uri}" if key_uri else "in cleartext"
            raise ConfigError(
                f"the sensitive fields' keyset ({encrypted}) cannot be read: {exc}"
            ) from None


def kms_aead(key_uri: str) -> Any:
    """Cloud KMS's AEAD for the key ``key_uri`` (Application Default Credentials)."""
    if not key_uri.startswith(KMS_PREFIX):
        raise ConfigError(f"a KMS key URI starts with {KMS_PREFIX}, not {key_uri!r}")
    from tink import aead
    from tink.integration import gcpkms

    aead.register()
    return gcpkms.GcpKmsClient(key_uri, None).get_aead(key_uri)


def new_keyset(*, key_uri: str | None = None) -> str:
    """A fresh AES256-SIV keyset as JSON: cleartext, or encrypted by the KMS key ``key_uri``."""
    import tink
    from tink import daead, secret_key_access

    daead.register()
    handle = tink.new_keyset_handle(daead.deterministic_aead_key_templates.AES256_SIV)
    if key_uri is None:
        text: str = tink.json_proto_keyset_format.serialize(handle, secret_key_access.TOKEN)
        return text
    try:
        encrypted: str = tink.json_proto_keyset_format.serialize_encrypted(
            handle, kms_aead(key_uri), KEYSET_ASSOCIATED_DATA
        )
    except tink.TinkError as exc:
        raise ConfigError(f"the keyset could not be encrypted with {key_uri}: {exc}") from None
    return encrypted


def sealer_from_settings(settings: Settings) -> TinkSealer | None:
    """The sealer the settings name a keyset for, or None if they name none."""
    return _sealer(
        settings.sensitive_keyset, settings.sensitive_keyset_file, settings.sensitive_key_uri
    )


def sealer_from_env(environ: Mapping[str, str]) -> TinkSealer | None:
    """The sealer ``RELAYFLOW_SENSITIVE_KEYSET`` (or ``_FILE``, with ``_KEY_URI``) in
    ``environ`` names, or None: what a ``relayflow.Client`` holding the key opens results with."""
    path = environ.get("RELAYFLOW_SENSITIVE_KEYSET_FILE")
    return _sealer(
        environ.get("RELAYFLOW_SENSITIVE_KEYSET") or None,
        Path(path) if path else None,
        environ.get("RELAYFLOW_SENSITIVE_KEY_URI") or None,
    )


def _sealer(keyset: str | None, path: Path | None, key_uri: str | None) -> TinkSealer | None:
    if path is not None:
        keyset = _read(path)
    if keyset is None:
        return None
    return TinkSealer.from_keyset(keyset, key_uri=key_uri)


def write_keyset(path: Path) -> Path:
    """A fresh cleartext keyset in ``path`` (readable by its owner only), unless one is there:
    the local stack's, kept across restarts so its flows' sealed values still open."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(new_keyset())
    return path


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"RELAYFLOW_SENSITIVE_KEYSET_FILE {path}: {exc.strerror}") from None
