"""Who is calling the api (and its console), and what they may do.

Two roles: a viewer reads flows, rejected messages and dead letters; an operator may also
cancel, retry and replay. In the cloud the caller is the email in a verified Google ID token
(audience: the api's URL) and the role comes from the allowlists ``RELAYFLOW_API_VIEWERS`` and
``RELAYFLOW_API_OPERATORS`` (operators may view too). With verification off — the local
stack, on 127.0.0.1 — the api admits only requests from this machine, as ``local``, an
operator.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import IntEnum

from relayflow.core.errors import RelayflowError
from relayflow.gcp.auth import NotAllowed, TokenVerifier, Unauthorized
from relayflow.settings import Settings

LOCAL_CALLER = "local"


class Role(IntEnum):
    """What a caller may do; a higher role may do everything a lower one may."""

    VIEWER = 1
    OPERATOR = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Caller:
    """A caller the api has identified: who, and in which role."""

    identity: str
    role: Role

    def may(self, role: Role) -> bool:
        return self.role >= role


class Forbidden(RelayflowError):
    """Raised when the caller is known but may not do what they asked."""


class Access:
    """Identifies callers: by token when ``verifier`` is set, else as ``local`` on loopback."""

    def __init__(
        self,
        *,
        verifier: TokenVerifier | None,
        viewers: frozenset[str] = frozenset(),
        operators: frozenset[str] = frozenset(),
    ) -> None:
        self._verifier = verifier
        self._viewers = viewers
        self._operators = operators

    @property
    def verifying(self) -> bool:
        return self._verifier is not None

    def caller(self, authorization: str | None, remote_addr: str | None) -> Caller:
        """Who is calling; Unauthorized (no valid token) or Forbidden (not allowed here)."""
        if self._verifier is None:
            return _local(remote_addr)
        try:
            email = self._verifier.verify(authorization)
        except NotAllowed as exc:
            raise Forbidden(
                f"{exc}: add the email to RELAYFLOW_API_VIEWERS (read) or "
                "RELAYFLOW_API_OPERATORS (read, cancel, retry, replay)"
            ) from None
        role = Role.OPERATOR if email in self._operators else Role.VIEWER
        return Caller(email, role)

    def require(self, caller: Caller, role: Role, action: str) -> None:
        """Forbidden, saying what is missing, unless ``caller`` may ``action``."""
        if not caller.may(role):
            raise Forbidden(
                f"{caller.identity} is a {caller.role.label} and may not {action}: that needs "
                f"the {role.label} role (RELAYFLOW_API_OPERATORS)"
            )


def _local(remote_addr: str | None) -> Caller:
    try:
        loopback = ipaddress.ip_address(remote_addr or "").is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise Forbidden(
            "token verification is off (RELAYFLOW_API_VERIFY_TOKENS=false): the api admits "
            f"only requests from this machine, not from {remote_addr or 'an unknown address'}"
        )
    return Caller(LOCAL_CALLER, Role.OPERATOR)


def access_from_settings(settings: Settings) -> Access:
    """The api's Access: verified tokens with the settings' allowlists, or local-only."""
    if not settings.api_verify_tokens:
        return Access(verifier=None)
    viewers, operators = frozenset(settings.api_viewers), frozenset(settings.api_operators)
    audience = str(settings.api_url).rstrip("/")
    verifier = TokenVerifier(
        audience=[audience, *settings.api_audiences],
        allowed_emails=viewers | operators,
        certs_url=str(settings.oidc_certs_url) if settings.oidc_certs_url else None,
    )
    return Access(verifier=verifier, viewers=viewers, operators=operators)


__all__ = ["Access", "Caller", "Forbidden", "Role", "Unauthorized", "access_from_settings"]
