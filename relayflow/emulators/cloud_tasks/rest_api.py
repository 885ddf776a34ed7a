"""The REST/JSON front door on the v2 paths, plus /healthz, /stats and the OIDC certs."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from relayflow.emulators.cloud_tasks import protos as p
from relayflow.emulators.cloud_tasks.engine import Engine
from relayflow.emulators.cloud_tasks.errors import (
    ApiError,
    Internal,
    InvalidArgument,
    NotFound,
    Unimplemented,
)
from relayflow.emulators.cloud_tasks.oidc import TokenIssuer

log = logging.getLogger(__name__)

_LOC = r"projects/[^/:]+/locations/[^/:]+"
_QUEUE = _LOC + r"/queues/[^/:]+"
_TASK = _QUEUE + r"/tasks/[^/:]+"


@dataclass(frozen=True, slots=True)
class Route:
    """One REST binding: HTTP verb, path pattern, request type and where the body goes."""

    verb: str
    pattern: re.Pattern[str]
    request_cls: Any
    call: Callable[[Engine], Callable[[p.Proto], p.Proto | None]]
    path_field: str  # the request field the path's resource name fills
    body_field: str | None  # "*" = whole request, a field name, or None (query only)


def _route(
    verb: str,
    resource: str,
    suffix: str,
    request_cls: Any,
    call: Any,
    path_field: str,
    body: str | None,
) -> Route:
    pattern = re.compile(f"^/v2/({resource}){re.escape(suffix)}$")
    return Route(verb, pattern, request_cls, call, path_field, body)


# The HTTP bindings of google/cloud/tasks/v2/cloudtasks.proto.
ROUTES = (
    _route("GET", _LOC, "/queues", p.ListQueuesRequest, lambda e: e.list_queues, "parent", None),
    _route(
        "POST", _LOC, "/queues", p.CreateQueueRequest, lambda e: e.create_queue, "parent", "queue"
    ),
    _route("GET", _QUEUE, "", p.GetQueueRequest, lambda e: e.get_queue, "name", None),
    _route(
        "PATCH", _QUEUE, "", p.UpdateQueueRequest, lambda e: e.update_queue, "queue.name", "queue"
    ),
    _route("DELETE", _QUEUE, "", p.DeleteQueueRequest, lambda e: e.delete_queue, "name", None),
    _route("POST", _QUEUE, ":pause", p.PauseQueueRequest, lambda e: e.pause_queue, "name", "*"),
    _route("POST", _QUEUE, ":resume", p.ResumeQueueRequest, lambda e: e.resume_queue, "name", "*"),
    _route("POST", _QUEUE, ":purge", p.PurgeQueueRequest, lambda e: e.purge_queue, "name", "*"),
    _route("GET", _QUEUE, "/tasks", p.ListTasksRequest, lambda e: e.list_tasks, "parent", None),
    _route("POST", _QUEUE, "/tasks", p.CreateTaskRequest, lambda e: e.create_task, "parent", "*"),
    _route("GET", _TASK, "", p.GetTaskRequest, lambda e: e.get_task, "name", None),
    _route("DELETE", _TASK, "", p.DeleteTaskRequest, lambda e: e.delete_task, "name", None),
    _route("POST", _TASK, ":run", p.RunTaskRequest, lambda e: e.run_task, "name", "*"),
)
_IAM = re.compile(rf"^/v2/{_QUEUE}:(getIamPolicy|setIamPolicy|testIamPermissions)$")


class RestApi:
    """Translates HTTP+JSON to engine calls and back, with Google's JSON error shape."""

    def __init__(self, engine: Engine, issuer: TokenIssuer) -> None:
        self._engine = engine
        self._issuer = issuer

    def app(self) -> web.Application:
        app = web.Application(client_max_size=2 * 1024 * 1024)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/stats", self._stats)
        app.router.add_get("/oauth2/v1/certs", self._certs)
        app.router.add_route("*", "/{tail:.*}", self._api)
        return app

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _stats(self, request: web.Request) -> web.Response:
        engine = self._engine
        if request.query.get("reset") == "lags":
            engine.stats.reset_lags()
        snapshot = engine.stats.snapshot(
            queued=len(engine.tasks), in_flight=engine.in_flight_count(), queues=len(engine.queues)
        )
        return web.json_response(snapshot)

    async def _certs(self, request: web.Request) -> web.Response:
        return web.json_response(self._issuer.certs(), headers={"Cache-Control": "max-age=60"})

    async def _api(self, request: web.Request) -> web.Response:
        log.debug("REST %s %s", request.method, request.path_qs)
        alt = request.query.get("$alt", "") + request.query.get("alt", "")
        int_enums = "enum-encoding=int" in alt
        try:
            result = await self._call(request)
        except ApiError as exc:
            return web.json_response(exc.to_json(), status=exc.http_status)
        except Exception:
            # A bug must still answer Google's JSON shape, not aiohttp's plain-text 500.
            log.exception("REST %s %s failed", request.method, request.path)
            error = Internal("internal error in the Cloud Tasks emulator; see its log")
            return web.json_response(error.to_json(), status=error.http_status)
        body = json_format.MessageToDict(result, use_integers_for_enums=int_enums)
        return web.json_response(body)

    async def _call(self, request: web.Request) -> p.Proto:
        path = request.path
        if _IAM.match(path):
            raise Unimplemented("IAM methods are not implemented by the Cloud Tasks emulator")
        for route in ROUTES:
            match = route.pattern.match(path)
            if match is not None and route.verb == request.method:
                message = await _request_message(route, match.group(1), request)
                result = route.call(self._engine)(message)
                return p.Empty() if result is None else result
        raise NotFound(f"No Cloud Tasks method at {request.method} {path}")


async def _request_message(route: Route, resource: str, request: web.Request) -> p.Proto:
    message = route.request_cls()
    _parse(_query_fields(request), message)
    if route.body_field is not None:
        text = await request.text()
        if text.strip():
            target = message if route.body_field == "*" else getattr(message, route.body_field)
            fields = _loads(text)
            prefix = "" if route.body_field == "*" else route.body_field
            check_base64_fields(fields, target.DESCRIPTOR, prefix)
            _parse(fields, target)
    _set_path(message, route.path_field, resource)
    return message


# Google's system parameters: accepted on every call, never request fields.
_SYSTEM_PARAMS = frozenset(
    {
        "alt",
        "fields",
        "key",
        "prettyPrint",
        "quotaUser",
        "callback",
        "access_token",
        "oauth_token",
        "upload_protocol",
        "uploadType",
        "userIp",
        "xgafv",
    }
)


def _query_fields(request: web.Request) -> dict[str, Any]:
    return {
        k: v for k, v in request.query.items() if not k.startswith("$") and k not in _SYSTEM_PARAMS
    }


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"Invalid JSON payload received. {exc}") from exc


_BASE64_RE = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}$")


def check_base64_fields(fields: Any, descriptor: Any, path: str = "") -> None:
    """Refuse a bytes field whose JSON value is not base64, as Google's JSON front end does.

    json_format decodes leniently (it drops characters outside the alphabet), which would
    store a mangled body instead of refusing the request.
    """
    if not isinstance(fields, dict):
        return
    for key, value in fields.items():
        field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)
        if field is None or (field.message_type and field.message_type.GetOptions().map_entry):
            continue  # unknown names are json_format's to refuse; map keys are not fields
        where = f"{path}.{field.name}" if path else field.name
        for item in value if field.is_repeated and isinstance(value, list) else [value]:
            _check_field_value(field, item, where)


def _check_field_value(field: Any, value: Any, where: str) -> None:
    if field.type == FieldDescriptor.TYPE_BYTES and isinstance(value, str):
        if not _is_base64(value):
            raise InvalidArgument(
                f"Invalid value at '{where}' (TYPE_BYTES), Base64 decoding failed for "
                f"{value[:64]!r}"
            )
    elif field.message_type is not None:
        check_base64_fields(value, field.message_type, where)


def _is_base64(text: str) -> bool:
    """Standard or URL-safe alphabet, padding optional (as Google accepts)."""
    if not _BASE64_RE.match(text):
        return False
    core = text.rstrip("=")
    if len(core) % 4 == 1:
        return False
    return core == text or len(text) % 4 == 0


def _parse(fields: dict[str, Any], message: p.Proto) -> None:
    try:
        json_format.ParseDict(fields, message)
    except json_format.ParseError as exc:
        raise InvalidArgument(f"Invalid JSON payload received. {exc}") from exc


def _set_path(message: p.Proto, field: str, resource: str) -> None:
    *parents, leaf = field.split(".")
    target = message
    for name in parents:
        target = getattr(target, name)
    setattr(target, leaf, resource)
