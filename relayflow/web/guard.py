"""What the api admits before it asks who is calling, and the headers it answers with.

A browser can be made to call the api with the operator's credentials by any page it has open:
``gcloud run services proxy api --port 8080`` attaches the operator's identity to every request
that reaches its local port, whoever sends it, and on the local stack every request from this
machine is the operator. So a page on another site could post a cancel (CSRF), and a page whose
name its owner rebinds to 127.0.0.1 (DNS rebinding) is, to the browser, the api's own origin.
The guard refuses, with a 403 (415 or 400 for a body) that says what to send instead:

- a state-changing request (any method but GET, HEAD and OPTIONS) that the browser marks as
  coming from another site (``Sec-Fetch-Site: cross-site`` or ``same-site``), or whose
  ``Origin`` is not on the allowlist: the api's own URL's origin and ``RELAYFLOW_API_ORIGINS``
  (by default the proxy's ``http://localhost:8080`` and ``http://127.0.0.1:8080``). ``Origin``
  is never compared with ``Host``: the proxy rewrites ``Host`` (so the console's forms came back
  refused through it) and a rebound page chooses it;
- a console form without such an ``Origin`` (browsers send one with every POST);
- a JSON call whose body is not ``Content-Type: application/json`` and a JSON object, or, with
  no body, that lacks ``X-Relayflow-Request: 1``: either makes a browser ask first (a CORS
  preflight), and the api never answers one with CORS headers, so the call is never sent. The
  machines that call the api (the CLI, Pub/Sub's push to ``/signals``, external systems
  completing callbacks) send JSON bodies and no ``Origin``, and pass;
- with token verification off (the local stack), any request, reads too, whose ``Host`` is not
  the api's: 127.0.0.1, localhost and [::1] at its port, its URL's host, ``RELAYFLOW_API_HOSTS``.
  A rebound name is refused before the page can read anything.

What no check here can do: tell a rebound page's GET through the proxy from the operator's (the
proxy rewrites ``Host``, and a same-origin read carries no ``Origin``). The proxy is for the CLI
and short sessions; browsers belong behind IAP (the README's "Reads through the proxy").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, Response, g, request

from relayflow.core.errors import ConfigError
from relayflow.settings import Settings
from relayflow.web import params
from relayflow.web.access import Forbidden

log = logging.getLogger("relayflow.web.guard")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK = ("127.0.0.1", "localhost", "::1")
PROXY_ORIGINS = ("http://localhost:8080", "http://127.0.0.1:8080")
DEFAULT_API_URL = "http://127.0.0.1:8129"
# A header no page can add to a cross-site request without the preflight the api never grants.
REQUEST_HEADER = "X-Relayflow-Request"
CALLBACK_TOKEN_HEADER = "X-Relayflow-Callback-Token"
PREFLIGHTED = (REQUEST_HEADER, CALLBACK_TOKEN_HEADER)
FOREIGN_SITES = frozenset({"cross-site", "same-site"})
CONSOLE = "console"
# The console: its own scripts and styles only (none inline), never in a frame, forms only to
# itself. Everything else is JSON, which needs nothing at all.
CONSOLE_CSP = (
    "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'"
)
JSON_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
# A URL path with a token in it (the callback route of old): logged without it.
_TOKEN_PATH = re.compile(r"^(/callbacks/).+$")

Host = tuple[str, int | None]  # a host name and its port; None: any port


class UnknownHost(Forbidden):
    """Raised when, with token verification off, a request names a host that is not the api's
    (a page on a name rebound to this machine)."""


class CrossSite(Forbidden):
    """Raised when a state-changing request comes from a page of another origin."""


@dataclass(frozen=True)
class RequestGuard:
    """The origins whose pages may change state, and the hosts the api answers to when it
    verifies no tokens. The defaults are the settings' defaults with any port on loopback."""

    origins: frozenset[str] = field(
        default_factory=lambda: default_origins(DEFAULT_API_URL, PROXY_ORIGINS)
    )
    hosts: frozenset[Host] = frozenset((name, None) for name in LOOPBACK)

    def admit_host(self, header: str | None, scheme: str) -> None:
        """UnknownHost unless ``header`` (``Host``) names this api."""
        found = _host_of(header or "", scheme)
        if found is None or not any(_matches(found, allowed) for allowed in self.hosts):
            shown = (header or "")[:100]
            raise UnknownHost(
                f"this api does not answer to Host {shown!r}: with token verification off it "
                "answers 127.0.0.1, localhost and [::1] at its port and its RELAYFLOW_API_URL's "
                "host; add others to RELAYFLOW_API_HOSTS"
            )

    def admit_change(self, *, form: bool) -> None:
        """CrossSite unless this state-changing request comes from an allowed page, or from
        no page at all (a machine)."""
        if request.headers.get("Sec-Fetch-Site", "").lower() in FOREIGN_SITES:
            raise CrossSite(
                "this request comes from a page of another site (Sec-Fetch-Site): the api "
                "takes changes only from its own console and from programs"
            )
        origin = request.headers.get("Origin")
        if origin is None and not form:
            return  # not a browser: a program, which must then send JSON (admit_body)
        if origin is None or normalized_origin(origin) not in self.origins:
            raise CrossSite(
                f"the api takes forms and changes only from its own pages; Origin "
                f"{(origin or 'none')[:100]!r} is not on its list (RELAYFLOW_API_ORIGINS)"
            )


def default_origins(api_url: str, extra: Iterable[str]) -> frozenset[str]:
    """The api's own URL's origin (every loopback name of it, if it is on loopback) and
    ``extra``: ConfigError for one that is not ``scheme://host[:port]``."""
    own = normalized_origin(api_url.rstrip("/"))
    parts = urlsplit(own)
    names = LOOPBACK if parts.hostname in LOOPBACK else (parts.hostname or "",)
    port = f":{parts.port}" if parts.port else ""
    aliases = {f"{parts.scheme}://{_bracketed(name)}{port}" for name in names}
    found = set()
    for origin in extra:
        shown = normalized_origin(origin)
        if shown == "null":
            raise ConfigError(f"RELAYFLOW_API_ORIGINS: {origin!r} is not scheme://host[:port]")
        found.add(shown)
    return frozenset({own, *aliases, *found})


def normalized_origin(text: str) -> str:
    """``text`` as browsers write an Origin (lower case, no default port), or ``null`` if it
    is not an http(s) origin at all."""
    try:
        parts = urlsplit(text.strip().lower())
        port = parts.port
    except ValueError:
        return "null"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "null"
    if parts.path or parts.query or parts.fragment or parts.username or parts.password:
        return "null"
    shown = "" if port in (None, _default_port(parts.scheme)) else f":{port}"
    return f"{parts.scheme}://{_bracketed(parts.hostname)}{shown}"


def guard_from_settings(settings: Settings) -> RequestGuard:
    """The guard of a deployed api: its URL's origin and the listed ones; loopback at its port,
    its URL's host and the listed hosts."""
    api_url = str(settings.api_url).rstrip("/")
    url = urlsplit(api_url)
    port = url.port or _default_port(url.scheme)
    hosts: set[Host] = {(name, port) for name in LOOPBACK}
    hosts.add((url.hostname or "", port))
    for entry in settings.api_hosts:
        found = _host_of(entry, url.scheme, any_port=True)
        if found is None:
            raise ConfigError(f"RELAYFLOW_API_HOSTS: {entry!r} is not host[:port]")
        hosts.add(found)
    return RequestGuard(
        origins=default_origins(api_url, settings.api_origins), hosts=frozenset(hosts)
    )


def install(app: Flask, guard: RequestGuard, *, check_hosts: bool) -> None:
    """Check every request before its route runs; answer every one with the headers that
    keep a browser from framing, sniffing, caching or leaking it."""

    @app.before_request
    def admitted() -> None:
        if check_hosts:
            guard.admit_host(request.headers.get("Host"), request.scheme)
        if request.method in SAFE_METHODS or request.url_rule is None:
            return  # reads; and no route: its 404 or 405 answers
        form = request.blueprint == CONSOLE
        guard.admit_change(form=form)
        if not form:
            g.body = admit_body()

    @app.after_request
    def headers(response: Response) -> Response:
        return protected(response)


def admit_body() -> dict[str, Any]:
    """The JSON object a state-changing call sends (``{}`` for a bodiless one with a header
    that made the browser ask first): UnsupportedMediaType or BadRequest otherwise."""
    data = request.get_data(cache=True)
    if not data.strip():
        if any(request.headers.get(name) for name in PREFLIGHTED):
            return {}
        raise params.BadRequest(
            "send a JSON object body with Content-Type: application/json (e.g. {}), or, with "
            f"no body, the header {REQUEST_HEADER}: 1"
        )
    if request.mimetype != "application/json":
        raise params.UnsupportedMediaType(
            f"the body must be sent as Content-Type: application/json, not "
            f"{request.mimetype[:60] or 'none'!r}"
        )
    return params.json_object(data)


def body() -> dict[str, Any]:
    """The request's JSON object body, as the guard admitted it."""
    found: dict[str, Any] = g.get("body") or {}
    return found


def protected(response: Response) -> Response:
    """``response`` with the security headers: no framing, no sniffing, no caching of flow
    data, no referrer leaving the api (the console's pages send theirs to themselves only:
    with no referrer at all, a browser posts their forms with ``Origin: null``)."""
    html = response.mimetype == "text/html"
    response.headers["Content-Security-Policy"] = CONSOLE_CSP if html else JSON_CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin" if html else "no-referrer"
    if request.endpoint != f"{CONSOLE}.static":  # a stylesheet and a script: no flow data
        response.headers["Cache-Control"] = "no-store"
    return response


def logged_path(path: str) -> str:
    """``path`` as it may be logged: a token in it (the old callback route) left out."""
    return _TOKEN_PATH.sub(r"\1…", path)


def _host_of(text: str, scheme: str, *, any_port: bool = False) -> Host | None:
    """The name and port a ``Host`` header (or a setting's ``host[:port]``) names."""
    try:
        parts = urlsplit(f"//{text.strip().lower()}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.path or parts.query or parts.username:
        return None
    if port is None and not any_port:
        port = _default_port(scheme)
    return parts.hostname, port


def _matches(found: Host, allowed: Host) -> bool:
    return found[0] == allowed[0] and allowed[1] in (None, found[1])


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _bracketed(hostname: str) -> str:
    return f"[{hostname}]" if ":" in hostname else hostname


__all__ = [
    "CALLBACK_TOKEN_HEADER",
    "REQUEST_HEADER",
    "CrossSite",
    "RequestGuard",
    "UnknownHost",
    "body",
    "guard_from_settings",
    "install",
    "logged_path",
    "protected",
]
