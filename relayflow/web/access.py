"""Who is calling the api (and its console), and what they may do.

Two roles for people: a viewer reads flows, rejected messages and dead letters; an operator
may also cancel, retry and replay. A third, a completer, may only complete callback tokens: the
external systems callback steps wait on, and the Pub/Sub account that pushes ``flow-signals``.
In the cloud the caller is the email in a verified Google ID token (audience: the api's URL)
and the role comes from the allowlists ``RELAYFLOW_API_VIEWERS``, ``RELAYFLOW_API_OPERATORS``
(operators may view and complete too) and ``RELAYFLOW_API_COMPLETERS``. With verification
off — the local stack, on 127.0.0.1 — the api admits only requests from this machine, as
``local``, an operator.

A fourth, a signaller (``RELAYFLOW_API_SIGNALLERS``), may only send signals to flows (their
WaitForSignal steps: an approval, say); an email on that list and a viewer's is a viewer who
may also signal (the console's approve and reject buttons), and operators may signal anyway.

Reading flows' sensitive fields in clear is not a role but an allowlist beside them,
``RELAYFLOW_API_SENSITIVE_READERS`` (``Caller.sensitive``): a viewer or an operator on it sees
them opened (each read logged), every other caller sees ``"[redacted]"``
(``relayflow.web.redaction``). ``local``, the local stack's caller, reads them only if listed.

A caller may also be scoped to tenants (``RELAYFLOW_API_SCOPES``: email → tenants): it then
sees and acts on those tenants' flows only. Another tenant's flow answers 404, exactly as a
flow that does not exist, so a scoped caller cannot learn which ids other tenants use; lists
are narrowed to its tenants; rejected and dead-lettered messages, which no tenant vouches
for, are refused to it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Protocol

from relayflow.core.errors import FlowNotFound, NotAllowed, RelayflowError, Unauthorized
from relayflow.core.listing import FlowFilter
from relayflow.core.records import FlowRecord
from relayflow.settings import Settings

LOCAL_CALLER = "local"


class Role(IntEnum):
    """What a caller may do: a viewer reads, an operator also acts; a completer only completes
    callback tokens, which operators may do too and viewers may not (it is a write)."""

    SIGNALLER = -1  # below every other: it may only signal (``Caller.may``)
    COMPLETER = 0
    VIEWER = 1
    OPERATOR = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def setting(self) -> str:
        """The allowlist that grants this role."""
        return f"RELAYFLOW_API_{self.name}S"


@dataclass(frozen=True)
class Caller:
    """A caller the api has identified: who, and in which role."""

    identity: str
    role: Role
    # The tenants this caller may see and act on; None: every tenant.
    tenants: frozenset[str] | None = None
    # On the signallers' list as well as its role's: it may send signals too.
    signals: bool = False
    # On the sensitive readers' list: it sees flows' sensitive fields in clear.
    sensitive: bool = False

    def may(self, role: Role) -> bool:
        if role is Role.COMPLETER:
            return self.role in (Role.COMPLETER, Role.OPERATOR)
        if role is Role.SIGNALLER:
            return self.signals or self.role in (Role.SIGNALLER, Role.OPERATOR)
        return self.role >= role

    @property
    def scoped(self) -> bool:
        return self.tenants is not None

    def sees(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants

    def narrow(self, wanted: FlowFilter) -> FlowFilter:
        """``wanted`` limited to this caller's tenants: a scoped caller names one of them (or
        has only one, which is then implied); Forbidden for any other."""
        if self.tenants is None:
            return wanted
        if wanted.tenant is None:
            if len(self.tenants) == 1:
                return replace(wanted, tenant=next(iter(self.tenants)))
            raise Forbidden(
                f"{self.identity} sees tenants {', '.join(sorted(self.tenants))}: "
                "name one with tenant="
            )
        if wanted.tenant not in self.tenants:
            raise Forbidden(f"{self.identity} may not see tenant {wanted.tenant!r}")
        return wanted

    def shown(self, record: FlowRecord) -> FlowRecord:
        """``record`` if this caller may see it; else FlowNotFound, as for a missing flow."""
        if not self.sees(record.tenant):
            raise FlowNotFound(f"no flow with id {record.flow_id!r}")
        return record

    def unscoped(self, what: str) -> None:
        """Forbidden for a scoped caller: ``what`` belongs to no tenant in particular."""
        if self.tenants is not None:
            raise Forbidden(f"{self.identity} is scoped to tenants and may not {what}")


class Forbidden(RelayflowError):
    """Raised when the caller is known but may not do what they asked."""


class Verifier(Protocol):
    """What checks a request's bearer token (``relayflow.gcp.auth.TokenVerifier``, which the
    runtime builds): the caller's email; Unauthorized (NotAllowed: a caller not on its
    allowlist), or VerifierUnavailable when no token can be checked now."""

    def verify(self, authorization: str | None) -> str: ...


class Access:
    """Identifies callers: by token when ``verifier`` is set, else as ``local`` on loopback."""

    def __init__(
        self,
        *,
        verifier: Verifier | None,
        viewers: frozenset[str] = frozenset(),
        operators: frozenset[str] = frozenset(),
        completers: frozenset[str] = frozenset(),
        scopes: Mapping[str, frozenset[str]] | None = None,
        signallers: frozenset[str] = frozenset(),
        sensitive_readers: frozenset[str] = frozenset(),
    ) -> None:
        self._verifier = verifier
        self._sensitive_readers = sensitive_readers
        self._viewers = viewers
        self._operators = operators
        self._completers = completers
        self._signallers = signallers
        self._scopes = dict(scopes or {})

    @property
    def verifying(self) -> bool:
        return self._verifier is not None

    def caller(self, authorization: str | None, remote_addr: str | None) -> Caller:
        """Who is calling; Unauthorized (no valid token) or Forbidden (not allowed here)."""
        if self._verifier is None:
            local = _local(remote_addr)
            return replace(local, sensitive=LOCAL_CALLER in self._sensitive_readers)
        try:
            email = verify(self._verifier, authorization)
        except NotAllowed as exc:
            raise Forbidden(
                f"{exc}: add the email to RELAYFLOW_API_VIEWERS (read), "
                "RELAYFLOW_API_OPERATORS (read, cancel, retry, replay) or "
                "RELAYFLOW_API_COMPLETERS (complete callback tokens only) or "
                "RELAYFLOW_API_SIGNALLERS (send signals to flows)"
            ) from None
        signals = email in self._signallers
        role = self._role(email)
        # A sensitive reader must also read flows: a completer or a signaller does not.
        sensitive = email in self._sensitive_readers and role >= Role.VIEWER
        return Caller(email, role, self._scopes.get(email), signals=signals, sensitive=sensitive)

    def _role(self, email: str) -> Role:
        if email in self._operators:
            return Role.OPERATOR
        if email in self._viewers:
            return Role.VIEWER
        if email in self._signallers and email not in self._completers:
            return Role.SIGNALLER
        return Role.COMPLETER

    def require(self, caller: Caller, role: Role, action: str) -> None:
        """Forbidden, saying what is missing, unless ``caller`` may ``action``."""
        if not caller.may(role):
            raise Forbidden(
                f"{caller.identity} is a {caller.role.label} and may not {action}: that needs "
                f"the {role.label} role ({_granting(role)})"
            )


def verify(verifier: Verifier, authorization: str | None) -> str:
    """``verifier.verify``, with a token whose JSON nests too deep for the parser (google-auth
    lets RecursionError through) refused like any other malformed token, not a 500."""
    try:
        return verifier.verify(authorization)
    except RecursionError:
        raise Unauthorized("invalid token: its JSON is nested too deep to be a JWT") from None


def _granting(role: Role) -> str:
    """The allowlists that give a caller ``role``."""
    if role is Role.VIEWER:
        return f"{Role.VIEWER.setting} or {Role.OPERATOR.setting}"
    if role is Role.COMPLETER:
        return f"{Role.COMPLETER.setting} or {Role.OPERATOR.setting}"
    if role is Role.SIGNALLER:
        return f"{Role.SIGNALLER.setting} or {Role.OPERATOR.setting}"
    return role.setting


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


def access_from_settings(settings: Settings, verifier: Verifier | None) -> Access:
    """The api's Access: tokens checked by ``verifier`` (``relayflow.runtime.api_verifier``,
    None when the settings turn verification off) with the settings' allowlists, or
    local-only."""
    readers = frozenset(settings.api_sensitive_readers)
    if verifier is None:
        return Access(verifier=None, sensitive_readers=readers)
    viewers, operators = frozenset(settings.api_viewers), frozenset(settings.api_operators)
    completers = frozenset(settings.api_completers)
    scopes = {email: frozenset(tenants) for email, tenants in settings.api_scopes.items()}
    return Access(
        verifier=verifier,
        viewers=viewers,
        operators=operators,
        completers=completers,
        scopes=scopes,
        signallers=frozenset(settings.api_signallers),
        sensitive_readers=readers,
    )


__all__ = [
    "Access",
    "Caller",
    "Forbidden",
    "Role",
    "Unauthorized",
    "Verifier",
    "access_from_settings",
    "verify",
]
