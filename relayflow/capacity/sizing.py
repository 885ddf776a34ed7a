"""Each environment's Cloud Run sizes and queue shards, derived from the capacity model.

``infra/terraform/sizing.json`` holds what one reference flow costs (a profile the capacity
bench measured: CPU seconds and requests per service, tasks per queue kind) and each
environment's target rate. From them this module computes, per environment:

* ``max_instances`` per service: the vCPUs the target needs at 70 % CPU, in instances of the
  service's vCPUs (at least ``MIN_MAX_INSTANCES``, so a deploy or a burst has room);
* ``concurrency`` per service: the requests one instance's vCPUs keep in flight
  (``WALL_PER_CPU`` per vCPU: a handler waits on Firestore, Cloud Tasks and the client API for
  most of its time), which is also its gunicorn threads;
* ``queue_shards``: enough shards that no queue of any kind dispatches more than 70 % of its
  configured rate.

and writes them as the defaults of ``envs/ENV/sizing.tf`` (``make sizing``). A team that
changes the target or re-measures the profile regenerates the file; tests/infra/test_sizing.py
fails when a file differs from what the model gives, so the numbers never drift from the model.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from relayflow.capacity import limits
from relayflow.capacity.deployment import Deployment
from relayflow.capacity.model import SERVICE_QUEUES, START_SERVICE, WALL_PER_CPU, ShapeRun
from relayflow.capacity.model import requests_of as _requests_of
from relayflow.capacity.oplog import TASK_CREATE, of_kind
from relayflow.capacity.terraform import read_deployment

SIZING_FILE = Path("infra") / "terraform" / "sizing.json"
# Room for a rolling deploy or a burst before Cloud Tasks' queues absorb it (Cloud Run's own
# advice is to start event-driven services at 3: docs/configuring/max-instances-limits).
MIN_MAX_INSTANCES = 3
# The api serves operators and callback completions: at least a few instances, more when the
# profile's mix completes callbacks (its CPU per flow).
API_SERVICE = "api"
API_MAX_INSTANCES = 3
SIZED_SERVICES = (START_SERVICE, *SERVICE_QUEUES, API_SERVICE)
# The module accepts 1..250 shards: four kinds x 250 = the 1,000 queues a project may have per
# region (https://docs.cloud.google.com/tasks/docs/quotas).
MAX_QUEUE_SHARDS = 250
_SHARDS_DEFAULT = re.compile(r'variable "queue_shards" \{[^}]*?default\s*=\s*(\d+)', re.S)


class SizingError(ValueError):
    """Raised when sizing.json is malformed or a target cannot be met by the module's bounds."""


@dataclass(frozen=True)
class Profile:
    """What one flow of the measured mix costs: CPU seconds and requests per service, tasks per
    queue kind (all queues of a kind together)."""

    cpu_s: Mapping[str, float]
    requests: Mapping[str, float]
    tasks: Mapping[str, float]
    measured: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "measured": self.measured,
            "cpu_s_per_flow": {k: round(v, 6) for k, v in sorted(self.cpu_s.items())},
            "requests_per_flow": {k: round(v, 4) for k, v in sorted(self.requests.items())},
            "tasks_per_flow": {k: round(v, 4) for k, v in sorted(self.tasks.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Profile:
        try:
            return cls(
                cpu_s=_numbers(data["cpu_s_per_flow"], "cpu_s_per_flow"),
                requests=_numbers(data["requests_per_flow"], "requests_per_flow"),
                tasks=_numbers(data["tasks_per_flow"], "tasks_per_flow"),
                measured=str(data.get("measured", "")),
            )
        except KeyError as exc:
            raise SizingError(f"sizing.json: profile has no {exc.args[0]!r}") from None


def _numbers(value: Any, what: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise SizingError(f"sizing.json: {what} must be an object of numbers")
    out = {}
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
            raise SizingError(f"sizing.json: {what}.{key} must be a number >= 0, not {number!r}")
        out[str(key)] = float(number)
    return out


def profile_of(
    runs: Mapping[str, ShapeRun], mix: Mapping[str, float], deployment: Deployment, measured: str
) -> Profile:
    """The per-flow figures of ``mix`` from the bench's runs."""
    cpu: dict[str, float] = {}
    requests: dict[str, float] = {}
    tasks: dict[str, float] = {}
    for shape, weight in mix.items():
        run = runs[shape]
        for service, seconds in run.cpu_s.items():
            cpu[service] = cpu.get(service, 0.0) + weight * seconds / run.flows
        for service, n in _requests_of(run, deployment).items():
            requests[service] = requests.get(service, 0.0) + weight * n
        created = [o for o in of_kind(run.ops, TASK_CREATE) if o.get("outcome") == "created"]
        for kind in deployment.queues:
            n = sum(1 for o in created if kind.holds(o.get("queue")))
            tasks[kind.kind] = tasks.get(kind.kind, 0.0) + weight * n / run.flows
    return Profile(cpu, requests, tasks, measured)


@dataclass(frozen=True)
class EnvSizing:
    """One environment's sizes at its target rate."""

    env: str
    rate: float
    max_instances: Mapping[str, int]
    concurrency: Mapping[str, int]
    queue_shards: int


def size(env: str, rate: float, profile: Profile, deployment: Deployment) -> EnvSizing:
    """The sizes ``deployment``'s services (their vCPUs) and queues (their rates) need at
    ``rate`` flows/s of the profile's mix."""
    if not rate > 0:
        raise SizingError(f"sizing.json: {env}'s target must be > 0 flows/s, not {rate!r}")
    instances, concurrency = {}, {}
    for name in SIZED_SERVICES:
        service = deployment.service(name)
        vcpus = service.cpu if service is not None else 1.0
        threads = max(1, math.ceil(WALL_PER_CPU * vcpus))
        concurrency[name] = min(threads, int(limits.CLOUD_RUN_CONCURRENCY.value))
        needed = profile.cpu_s.get(name, 0.0) * rate / (vcpus * limits.TARGET_SHARE)
        floor = API_MAX_INSTANCES if name == API_SERVICE else MIN_MAX_INSTANCES
        instances[name] = max(floor, math.ceil(needed))
    return EnvSizing(env, rate, instances, concurrency, queue_shards(rate, profile, deployment))


def queue_shards(rate: float, profile: Profile, deployment: Deployment) -> int:
    """Shards per kind so that every kind's queues stay at <= 70 % of their rate (one count for
    every kind: RELAYFLOW_QUEUE_SHARDS)."""
    shards = 1
    for kind in deployment.queues:
        per_queue = min(kind.max_dispatches_per_second, limits.TASKS_QUEUE_DISPATCH.value)
        dispatches = profile.tasks.get(kind.kind, 0.0) * rate
        shards = max(shards, math.ceil(dispatches / (per_queue * limits.TARGET_SHARE)))
    if shards > MAX_QUEUE_SHARDS:
        raise SizingError(
            f"{rate:g} flows/s needs {shards} queue shards per kind; the module allows "
            f"{MAX_QUEUE_SHARDS} (1,000 queues per region): use another region or project"
        )
    return shards


@dataclass(frozen=True)
class SizingFile:
    """infra/terraform/sizing.json: the profile and each environment's target flows/s."""

    profile: Profile
    targets: Mapping[str, float]

    @classmethod
    def read(cls, repo: Path) -> SizingFile:
        path = repo / SIZING_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SizingError(f"{path}: {exc}") from None
        if not isinstance(data, Mapping) or not isinstance(data.get("profile"), Mapping):
            raise SizingError(f"{path}: expected an object with 'profile' and 'targets'")
        return cls(Profile.from_json(data["profile"]), _numbers(data.get("targets"), "targets"))

    def write(self, repo: Path) -> None:
        data = {
            "_comment": "The capacity model's input for each environment's sizing.tf "
            "(relayflow.capacity.sizing): what one reference flow costs, measured by "
            "bench/capacity.py --save-profile, and each environment's target flows/s. "
            "Edit a target, then `make sizing`.",
            "targets": dict(self.targets),
            "profile": self.profile.to_json(),
        }
        (repo / SIZING_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _object(values: Mapping[str, int]) -> list[str]:
    width = max(len(k) for k in values)
    return [f"    {k:<{width}} = {v}" for k, v in values.items()]


def render(sizing: EnvSizing, profile: Profile) -> str:
    """``envs/ENV/sizing.tf``: the three variables, their defaults from the model."""
    keys = "\n".join(f"    {k:<10} = number" for k in SIZED_SERVICES)
    rate = f"{sizing.rate:,.0f}"
    head = (
        f"# Generated by `make sizing` (relayflow.capacity.sizing) for {sizing.env} at {rate} "
        "flows/s,\n"
        "# from infra/terraform/sizing.json (what a reference flow costs, measured "
        f"{profile.measured or 'by bench/capacity.py'}).\n"
        "# Change the target there and regenerate; tests/infra/test_sizing.py fails when this "
        "file drifts.\n"
        "# A terraform.tfvars value still overrides any of these defaults.\n"
    )

    def variable(name: str, description: str, body: list[str]) -> str:
        return "\n".join([f'variable "{name}" {{', f'  description = "{description}"', *body, "}"])

    instances = variable(
        "max_instances",
        f"Maximum Cloud Run instances per component: {rate} flows/s at 70 % CPU "
        "(docs/capacity.md).",
        ["  type = object({", keys, "  })", "  default = {", *_object(sizing.max_instances), "  }"],
    )
    concurrency = variable(
        "concurrency",
        "Concurrent requests (and gunicorn threads) per Cloud Run instance, per component "
        "(docs/capacity.md).",
        ["  type = object({", keys, "  })", "  default = {", *_object(sizing.concurrency), "  }"],
    )
    shards = variable(
        "queue_shards",
        f"Cloud Tasks queues of each kind in {sizing.env} (RELAYFLOW_QUEUE_SHARDS): each "
        "dispatches at most 500 tasks/s. Grow it, never lower it (Terraform refuses to delete "
        "a shard that may hold tasks); ramp traffic onto new shards by Cloud Tasks' 500/50/5 "
        'rule (infra/terraform/README.md, \\"Queue shards\\").',
        [
            "  type        = number",
            f"  default     = {sizing.queue_shards}",
            "  nullable    = false",
        ],
    )
    return head + "\n" + "\n\n".join([instances, concurrency, shards]) + "\n"


def written_shards(text: str) -> int:
    """The queue_shards default a sizing.tf already gives (1 if none)."""
    found = _SHARDS_DEFAULT.search(text)
    return int(found.group(1)) if found else 1


def sizing_path(repo: Path, env: str) -> Path:
    return repo / "infra" / "terraform" / "envs" / env / "sizing.tf"


def regenerate(repo: Path, *, check: bool = False) -> list[str]:
    """Write (or with ``check``, compare) every environment's sizing.tf; the messages say what
    changed or differs."""
    spec = SizingFile.read(repo)
    messages = []
    for env, rate in sorted(spec.targets.items()):
        deployment = read_deployment(repo, env)
        path = sizing_path(repo, env)
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        sized = size(env, rate, spec.profile, deployment)
        # Shards only grow: a queue dropped from the Terraform may still hold tasks.
        sized = replace(sized, queue_shards=max(sized.queue_shards, written_shards(old)))
        text = render(sized, spec.profile)
        if old == text:
            continue
        messages.append(f"{path.relative_to(repo)}: {'differs from' if check else 'now'} the model")
        if not check:
            path.write_text(text, encoding="utf-8")
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write each environment's sizing.tf from infra/terraform/sizing.json."
    )
    parser.add_argument("--repo", type=Path, default=Path.cwd())
    parser.add_argument("--check", action="store_true", help="only say which files differ")
    args = parser.parse_args(argv)
    try:
        messages = regenerate(args.repo.resolve(), check=args.check)
    except (SizingError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in messages:
        print(line)
    if not messages:
        print("every environment's sizing.tf matches the model")
    return 1 if args.check and messages else 0


if __name__ == "__main__":
    raise SystemExit(main())
