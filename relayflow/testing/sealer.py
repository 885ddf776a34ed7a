"""A sealer for tests and the harness: AES-SIV (the cipher of Tink's deterministic AEAD) under
a key held in memory, with no keyset, no KMS and nothing to configure.

Real encryption, so a test that finds a value in clear in a document found a real leak; for
everything else (keysets, rotation, Cloud KMS), ``relayflow.gcp.sealer.TinkSealer``.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.ciphers.aead import AESSIV


class MemorySealer:
    """``core.sealing.Sealer`` over AES-SIV with ``key`` (64 bytes; a fresh one if None)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._aead = AESSIV(key or AESSIV.generate_key(512))

    def seal(self, plaintext: bytes, associated_data: bytes) -> bytes:
        return self._aead.encrypt(plaintext, [associated_data])

    def open(self, ciphertext: bytes, associated_data: bytes) -> bytes:
        return self._aead.decrypt(ciphertext, [associated_data])
