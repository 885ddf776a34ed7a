"""bench/capacity: each shape's start message, and runs kept for --replay read back the same."""

from __future__ import annotations

from pathlib import Path

from bench.capacity import SHAPES, body_of, load_runs, save_runs
from relayflow.capacity.model import ShapeRun
from relayflow.capacity.oplog import Op


def test_every_shape_starts_a_flow_of_the_capacity_app() -> None:
    flows = {body_of(shape, "x-00001")["flow"] for shape in SHAPES}

    assert flows == {"registration", "capacity_dag", "capacity_each", "fleet"}
    assert all(body_of(shape, "x-00001")["flow_id"] == "x-00001" for shape in SHAPES)


def test_saved_runs_replay_as_they_were(tmp_path: Path) -> None:
    ops = [Op("fs.write", "relayflow-worker", 1.5, 2.5, {"coll": "flows", "id": "a", "ts": []})]
    runs = {"reference": ShapeRun("reference", 3, ops, {"worker": 0.25})}

    save_runs(runs, tmp_path / "runs.json")

    assert load_runs(tmp_path / "runs.json") == runs
