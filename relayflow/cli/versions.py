"""Removing a flow version safely, through the api (``GET /versions``):

    relayflow versions list [--flow F]          flows not ended on each deployed version
    relayflow versions check [--app module:attr]
    relayflow drain --flow F --version V [--timeout-s S] [--interval-s S]

``versions check`` compares the versions the deployed app registers, with how many flows not
ended run on each, against the app about to be deployed (``--app``, default
``$RELAYFLOW_APP``): exit 1, naming each, if the new app drops a version flows still run on
(each would end ``DEFINITION_CHANGED`` at its next task); 0 otherwise. ``cloudbuild.yaml``
runs it before every deploy. ``drain`` shows how many flows are left on a version, on one line
updated as they end, until none is (exit 0) or the timeout passes (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from relayflow.cli import render
from relayflow.cli.api import Api, ApiError
from relayflow.cli.operate import api

if TYPE_CHECKING:
    from relayflow.core.flows import Registry
    from relayflow.core.versions import VersionUse

OLD_API = (
    "the api at {url} has no GET /versions: it runs a relayflow from before `versions check`; "
    "deploy this release once without the check (docs/deploy.md, 'Removing a flow version')"
)


class VersionsUnavailable(Exception):
    """Raised when the api cannot say how many flows run on each version."""


def uses(client: Api, query: dict[str, Any] | None = None) -> list[VersionUse]:
    """``GET /versions`` as VersionUse items."""
    from relayflow.core.versions import VersionUse

    try:
        found = client.get("/versions", query)
    except ApiError as exc:
        # No such route (an older api, or no api at all behind the URL), not the route's 404.
        if exc.status == 404 and (exc.code == "HTTP" or exc.message.startswith("no route ")):
            raise VersionsUnavailable(OLD_API.format(url=client.base_url)) from None
        raise
    return [VersionUse.from_json(doc) for doc in found["versions"]]


def cmd_list(args: argparse.Namespace, out: TextIO | None = None) -> int:
    print(table(uses(api(), {"flow": args.flow})), file=out or sys.stdout)
    return 0


def cmd_check(registry: Registry, target: str, out: TextIO | None = None) -> int:
    """Exit 1 if the app about to be deployed (``registry``, loaded from ``target``) drops a
    version flows not ended still run on."""
    from relayflow.core.versions import dropped, dropped_newest, keeps

    out = out or sys.stdout
    client = api()
    deployed = uses(client)
    kept = keeps(registry)
    print(f"deployed (the api at {client.base_url}) and to deploy ({target}):", file=out)
    print(table(deployed, kept), file=out)
    for idle in dropped_newest(deployed, kept):
        print(
            f"warning: {idle.flow} v{idle.version} is the version the deployed app starts new "
            f"{idle.flow} flows on, and {target} drops it: flows started while the new revision "
            "rolls out would end DEFINITION_CHANGED; deploy the version that replaces it first",
            file=out,
        )
    refused = dropped(deployed, kept)
    for use in refused:
        print(
            f"error: {target} no longer registers {use.flow} v{use.version}, and "
            f"{use.total} flows not ended run on it ({_by_status(use)}): each would end "
            f"DEFINITION_CHANGED at its next task. Keep v{use.version} registered until "
            f"`relayflow drain --flow {use.flow} --version {use.version}` says none is left",
            file=out,
        )
    if refused:
        return 1
    print("ok: no version that flows still run on is dropped", file=out)
    return 0


@dataclass
class Drain:
    """Waits until no flow runs on one version, showing how many are left as they end."""

    client: Api
    flow: str
    version: int
    timeout_s: float
    interval_s: float
    out: TextIO = field(default_factory=lambda: sys.stdout)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def run(self) -> int:
        began = self.clock()
        shown = ""
        while True:
            (use,) = uses(self.client, {"flow": self.flow, "version": self.version})
            if not shown:
                self._warn(use)
            waited_s = self.clock() - began
            line = f"{self.flow} v{self.version}: {self._left(use)} ({waited_s:.0f}s)"
            shown = self._show(line, shown)
            if use.total == 0:
                self._end(f"{self.flow} v{self.version} is drained: no flow runs on it")
                return 0
            if waited_s >= self.timeout_s:
                self._end(f"still {use.total} after {self.timeout_s:.0f}s", error=True)
                return 1
            self.sleep(min(self.interval_s, max(0.0, self.timeout_s - waited_s)))

    @staticmethod
    def _left(use: VersionUse) -> str:
        return f"{use.total} not ended" + (f" ({_by_status(use)})" if use.total else "")

    def _warn(self, use: VersionUse) -> None:
        if use.newest:
            print(
                f"note: v{use.version} is the newest {self.flow} version the deployed app "
                "registers: new flows still start on it, so it drains only once a newer version "
                "is deployed beside it",
                file=self.out,
                flush=True,
            )

    def _show(self, line: str, shown: str) -> str:
        """On a terminal, one line rewritten in place; elsewhere, a line per change."""
        if self.out.isatty():
            print(f"\r{line:<{len(shown)}}", end="", file=self.out, flush=True)
        elif line.split(" (")[0] != shown.split(" (")[0]:
            print(line, file=self.out, flush=True)
        return line

    def _end(self, line: str, *, error: bool = False) -> None:
        if self.out.isatty():
            print(file=self.out)
        print(line, file=sys.stderr if error else self.out, flush=True)


def cmd_drain(args: argparse.Namespace) -> int:
    return Drain(api(), args.flow, args.version, args.timeout_s, args.interval_s).run()


def table(found: list[VersionUse], kept: Callable[[str, int], bool] | None = None) -> str:
    """Each version: flows not ended on it by status, whether the deployed app starts new flows
    on it, and (with ``kept``) what the app to deploy does with it."""
    rows = [["FLOW", "VERSION", "NOT ENDED", "DEPLOYED", *(["TO DEPLOY"] if kept else [])]]
    for use in found:
        deployed = "newest" if use.newest else "yes" if use.registered else "no"
        row = [use.flow, f"v{use.version}", _left_cell(use), deployed]
        if kept is not None:
            row.append("kept" if kept(use.flow, use.version) else "dropped")
        rows.append([render.text(cell) for cell in row])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def _left_cell(use: VersionUse) -> str:
    return f"{use.total}" + (f" ({_by_status(use)})" if use.total else "")


def _by_status(use: VersionUse) -> str:
    return ", ".join(f"{s.value} {n}" for s, n in use.running.items() if n)


__all__ = ["Drain", "VersionsUnavailable", "cmd_check", "cmd_drain", "cmd_list", "table", "uses"]
