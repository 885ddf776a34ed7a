"""Which flows a deployment runs: ``RELAYFLOW_APP=package.module:attribute``.

The target names a ``Registry``, or a callable that takes ``Settings`` (or nothing) and returns
one, the way functions-framework takes ``--target`` and Celery takes ``-A``. Every entry point
(the start function, the worker, the poller, the api, the CLI, ``relayflow local up --app``)
loads it once at start; a target that cannot be loaded stops the process with a message that
names the target and the problem.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from relayflow.core.errors import ConfigError
from relayflow.core.flows import Registry
from relayflow.settings import DEFAULT_APP, Settings

__all__ = ["DEFAULT_APP", "AppError", "load_registry"]
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_TARGET = re.compile(rf"^({_DOTTED}):({_DOTTED})$")


class AppError(ConfigError):
    """Raised when ``RELAYFLOW_APP`` does not name a loadable registry of flows."""

    def __init__(self, target: str, problem: str) -> None:
        super().__init__(f"RELAYFLOW_APP={target!r}: {problem}")
        self.target = target
        self.problem = problem


def load_registry(target: str, settings: Settings) -> Registry:
    """The registry ``target`` names, built with ``settings``; AppError saying why not."""
    module_name, attribute = _split(target)
    found = _attribute(target, _import(target, module_name), attribute)
    registry = _as_registry(target, found, settings)
    if len(registry) == 0:
        raise AppError(target, "the registry has no flows")
    return registry


def _split(target: str) -> tuple[str, str]:
    match = _TARGET.match(target.strip())
    if match is None:
        raise AppError(target, "expected 'package.module:attribute', e.g. 'myflows.flows:registry'")
    return match.group(1), match.group(2)


def _import(target: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):
            return _missing(target, exc.name, exc)
        raise AppError(target, f"importing {module_name!r} failed: {exc}") from exc
    except ConfigError as exc:  # a flow defined wrongly at import time
        raise AppError(target, f"{module_name!r} defines an invalid flow: {exc}") from exc
    except Exception as exc:  # a syntax error, a failing import-time statement
        raise AppError(
            target, f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _missing(target: str, missing: str, exc: ModuleNotFoundError) -> Any:
    raise AppError(
        target, f"no module named {missing!r} (is its package installed, or on PYTHONPATH?)"
    ) from exc


def _attribute(target: str, module: Any, attribute: str) -> Any:
    found = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise AppError(target, f"module {module.__name__!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    return found


def _as_registry(target: str, found: Any, settings: Settings) -> Registry:
    if isinstance(found, Registry):
        return found
    if not callable(found):
        raise AppError(
            target,
            f"is a {type(found).__name__}, not a Registry or a callable that returns one",
        )
    built = _call(target, found, settings)
    if not isinstance(built, Registry):
        raise AppError(target, f"returned a {type(built).__name__}, not a Registry")
    return built


def _call(target: str, factory: Any, settings: Settings) -> Any:
    try:
        takes_settings = bool(inspect.signature(factory).parameters)
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        takes_settings = True
    try:
        return factory(settings) if takes_settings else factory()
    except ConfigError as exc:
        raise AppError(target, f"building the registry failed: {exc}") from exc
    except Exception as exc:
        raise AppError(
            target, f"building the registry failed: {type(exc).__name__}: {exc}"
        ) from exc
