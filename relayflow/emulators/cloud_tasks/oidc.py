"""OIDC tokens for HTTP targets, signed by a key the emulator owns, with Google's certs shape.

A service verifies them with `google.oauth2.id_token.verify_token(token, request,
audience=..., certs_url="http://HOST:REST_PORT/oauth2/v1/certs")`, just as it verifies Google's.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

ISSUER = "https://accounts.google.com"
TOKEN_LIFETIME_S = 3600
# Reuse a token for a while, as Google's token service does; signing costs ~1 ms.
REUSE_FOR_S = 300

_KEY_FILE = "oidc-key.pem"


class TokenIssuer:
    """Mints ID tokens for (service account, audience) pairs and publishes the public key."""

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        self._key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self._cert_pem = _self_signed_cert(key).public_bytes(serialization.Encoding.PEM)
        self.key_id = hashlib.sha1(self._cert_pem).hexdigest()
        self._key = key
        self._cache: dict[tuple[str, str], tuple[int, str]] = {}

    @classmethod
    def generate(cls) -> TokenIssuer:
        return cls(rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def load_or_create(cls, data_dir: Path) -> TokenIssuer:
        """Keep the key across restarts so tokens minted before one still verify after it."""
        path = data_dir / _KEY_FILE
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(key, rsa.RSAPrivateKey):
                raise ValueError(f"{path} does not hold an RSA key")
            return cls(key)
        issuer = cls.generate()
        path.write_bytes(issuer._key_pem)
        path.chmod(0o600)
        return issuer

    def certs(self) -> dict[str, str]:
        """`{kid: PEM certificate}`, the shape of https://www.googleapis.com/oauth2/v1/certs."""
        return {self.key_id: self._cert_pem.decode()}

    def token(self, *, email: str, audience: str, now_s: int) -> str:
        cached = self._cache.get((email, audience))
        if cached is not None and now_s - cached[0] < REUSE_FOR_S:
            return cached[1]
        payload = {
            "iss": ISSUER,
            "aud": audience,
            "azp": _subject(email),
            "sub": _subject(email),
            "email": email,
            "email_verified": True,
            "iat": now_s,
            "exp": now_s + TOKEN_LIFETIME_S,
        }
        token = self._sign(payload)
        self._cache[(email, audience)] = (now_s, token)
        return token

    def _sign(self, payload: dict[str, object]) -> str:
        """An RS256 JWT with the key id in its header, as Google's tokens carry it."""
        header = {"alg": "RS256", "typ": "JWT", "kid": self.key_id}
        signing_input = f"{_b64(header)}.{_b64(payload)}".encode()
        signature = self._key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input.decode()}.{_b64url(signature)}"


def _b64(value: Mapping[str, object]) -> str:
    return _b64url(json.dumps(value, separators=(",", ":")).encode())


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _subject(email: str) -> str:
    """A stable 21-digit, number-like subject per service account, like Google's."""
    digest = hashlib.sha256(email.encode()).digest()
    return str(10**20 + int.from_bytes(digest[:8], "big"))


def _self_signed_cert(key: rsa.RSAPrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cloud-tasks-emulator")])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
