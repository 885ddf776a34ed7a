"""The built wheel, installed into a fresh virtualenv, brings only ``relayflow`` import names.

A team's environment may have its own ``services``, ``functions`` or ``emulators`` package: the
wheel must not put a package of those names (or any other generic one) beside theirs. The
services' and the start function's entry points, and the local emulators, live under
``relayflow`` and import from the installed wheel, not from this source tree.

The venv is ``conftest.installed``'s: the wheel alone, its dependencies borrowed.
"""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import run

# What a relayflow install may add beside ``relayflow``: its own metadata, its CLI script.
LISTING = """
import importlib.metadata as m, json
files = m.distribution("relayflow").files or []
print(json.dumps(sorted({f.parts[0] for f in files if not f.parts[0].startswith("..")})))
"""
IMPORTS = """
import importlib.util, json, relayflow
names = ["services", "functions", "emulators", "relayflow.services.api.main",
         "relayflow.functions.start_flow.main", "relayflow.emulators.cloud_tasks"]
from relayflow.schemas import SCHEMAS
print(json.dumps({"relayflow": relayflow.__file__,
                  "schemas": sorted(p.committed()["$id"] for p in SCHEMAS.values()),
                  **{n: importlib.util.find_spec(n) is not None for n in names}}))
"""


def test_the_wheel_installs_only_relayflow_import_names(installed: Path) -> None:
    top_level = json.loads(run(installed, LISTING))
    assert top_level == ["relayflow", "relayflow-0.1.0.dist-info"]


def test_the_entry_points_and_emulators_import_from_the_wheel_alone(installed: Path) -> None:
    found = json.loads(run(installed, IMPORTS))
    assert Path(found.pop("relayflow")).is_relative_to(installed.parents[1]), "not the wheel's"
    assert found.pop("schemas") == [  # package data: what the api serves
        "urn:relayflow:schema:result-event:v1",
        "urn:relayflow:schema:signal-message:v1",
        "urn:relayflow:schema:start-message:v1",
    ]
    assert found == {
        "services": False,
        "functions": False,
        "emulators": False,
        "relayflow.services.api.main": True,
        "relayflow.functions.start_flow.main": True,
        "relayflow.emulators.cloud_tasks": True,
    }
