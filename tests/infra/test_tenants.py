"""Tenants, dependencies and api scopes (issue 11) reach the services as the JSON they read.

The module's variables are typed objects that mirror RELAYFLOW_TENANTS and
RELAYFLOW_DEPENDENCIES; the services get them jsonencoded, unset fields left out. Where the
terraform binary is installed (no provider is needed: only variables and locals are
evaluated), the module's own variable blocks and locals are run on sample values, and what
they build is parsed as the services parse it; what they refuse, relayflow refuses too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import hcl2
import pytest
from tfconfig import MODULES, env_dirs, load
from tfprobe import block, needs_terraform, outputs, run, write_calls

from relayflow.core.errors import ConfigError
from relayflow.core.tenants import TENANT_PATTERN, TenantPolicy, Tenants

RELAYFLOW = MODULES / "relayflow"
ISSUE_11 = ("tenants", "dependencies", "api_scopes")
TENANT_FIELDS = {"max_running", "starts_per_s", "priority", "paused"}
BREAKER_FIELDS = {
    "enabled",
    "window_s",
    "min_calls",
    "failure_rate",
    "open_s",
    "max_open_s",
    "probes",
    "retry_budget",
    "min_retries",
}


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


# --- The variables ------------------------------------------------------------------------------


def test_the_variables_mirror_the_json_the_services_read() -> None:
    variables = load(RELAYFLOW).variables
    tenants = _squeeze(variables["tenants"].body["type"])
    for field in TENANT_FIELDS:
        # In the default policy and in each tenant's.
        assert len(re.findall(rf"(?<!\w){field}=optional\(", tenants)) == 2, field
    assert "default=optional(object({" in tenants and "tenants=optional(map(object({" in tenants
    dependencies = _squeeze(variables["dependencies"].body["type"])
    for field in BREAKER_FIELDS:
        assert len(re.findall(rf"(?<!\w){field}=optional\(", dependencies)) == 2, field
    assert "dependencies=optional(map(object({" in dependencies
    assert variables["api_scopes"].body["type"] == "${map(list(string))}"
    # The Python model has exactly these fields (extra="forbid" there).
    assert set(Tenants.model_fields) == {"default", "tenants"}
    assert set(TenantPolicy.model_fields) == TENANT_FIELDS
    for name in ISSUE_11:
        assert variables[name].body["default"] == {}, name
        assert variables[name].body["nullable"] is False, name


def test_tenant_names_are_checked_with_relayflows_own_pattern() -> None:
    conditions = [v["condition"] for v in load(RELAYFLOW).variables["tenants"].body["validation"]]
    assert any(TENANT_PATTERN in c for c in conditions)
    scopes = [v["condition"] for v in load(RELAYFLOW).variables["api_scopes"].body["validation"]]
    assert any(TENANT_PATTERN in c for c in scopes)


@pytest.mark.parametrize("path", env_dirs(), ids=[p.name for p in env_dirs()])
def test_each_env_declares_them_with_the_modules_types(path: Path) -> None:
    module = load(RELAYFLOW).variables
    env = load(path).variables
    for name in ISSUE_11:
        assert _squeeze(env[name].body["type"]) == _squeeze(module[name].body["type"]), name
        assert env[name].body["default"] == {}, name
        assert load(path).modules["relayflow"].body[name] == f"${{var.{name}}}"


def test_every_service_reads_tenants_and_dependencies_and_the_api_its_scopes() -> None:
    relayflow = load(RELAYFLOW)
    common = relayflow.locals["common_env"]
    assert common["RELAYFLOW_TENANTS"] == "${local.tenants_json}"
    assert common["RELAYFLOW_DEPENDENCIES"] == "${local.dependencies_json}"
    for call in ("start_flow", "worker", "poller", "api"):
        assert "local.common_env" in relayflow.modules[call].body["env"] or (
            "local.handler_env" in relayflow.modules[call].body["env"]
        ), call
    assert "merge(local.common_env," in relayflow.locals["handler_env"]
    api_env = relayflow.modules["api"].body["env"]
    assert "RELAYFLOW_API_SCOPES = jsonencode(var.api_scopes)" in api_env
    for call in ("start_flow", "worker", "poller"):
        assert "RELAYFLOW_API_SCOPES" not in relayflow.modules[call].body["env"], call


# --- What Terraform builds, run by terraform itself ----------------------------------------------


def _local(text: str, name: str) -> str:
    """``name = jsonencode({...})`` of the locals, as written."""
    start = text.index(f"  {name} = jsonencode(")
    return block(text[start:], "{").join([f"{name} = jsonencode(", ")"])


def _probe_module(directory: Path) -> None:
    """A module of the relayflow module's own issue-11 variables and locals, and outputs."""
    variables = (RELAYFLOW / "variables.tf").read_text(encoding="utf-8")
    main = (RELAYFLOW / "main.tf").read_text(encoding="utf-8")
    blocks = [block(variables, f'variable "{name}" {{') for name in ISSUE_11]
    locals_ = [_local(main, "tenants_json"), _local(main, "dependencies_json")]
    directory.mkdir()
    (directory / "main.tf").write_text(
        "\n\n".join(blocks)
        + "\n\nlocals {\n"
        + "\n".join(locals_)
        + "\n}\n\n"
        + 'output "tenants" { value = local.tenants_json }\n'
        + 'output "dependencies" { value = local.dependencies_json }\n'
        + 'output "api_scopes" { value = jsonencode(var.api_scopes) }\n',
        encoding="utf-8",
    )


def _run(root: Path, cases: dict[str, dict[str, Any]], command: list[str]) -> str:
    _probe_module(root / "probe")
    write_calls(root, cases)
    done = run(root, *command)
    return done.stdout + done.stderr


TENANTS_FILE = {
    "default": {"max_running": 0},
    "tenants": {
        "acme": {"max_running": 50, "starts_per_s": 5, "priority": "high"},
        "globex": {"paused": True},
    },
}
VALID = {
    "nothing": {},
    "file": {
        "tenants": TENANTS_FILE,
        "dependencies": {
            "default": {"window_s": 60, "failure_rate": 0.5},
            "dependencies": {"client-api": {"enabled": True, "open_s": 30, "max_open_s": 600}},
        },
        "api_scopes": {"alice@acme.com": ["acme"]},
    },
    "empty_sections": {"tenants": {"tenants": {}}, "dependencies": {"default": {}}},
}


@needs_terraform
def test_the_json_terraform_builds_is_what_the_services_read(tmp_path: Path) -> None:
    _run(tmp_path, VALID, ["apply", "-auto-approve"])
    built = {
        name: {k: json.loads(v) for k, v in out.items()} for name, out in outputs(tmp_path).items()
    }
    # Nothing set: {} everywhere, which relayflow reads as no limits, no breakers, no scopes.
    assert built["nothing"] == {"tenants": {}, "dependencies": {}, "api_scopes": {}}
    assert Tenants.parse(json.dumps(built["nothing"]["tenants"])) == Tenants()
    # The same file as `relayflow local up --tenants`: the services get exactly its content.
    assert built["file"]["tenants"] == TENANTS_FILE
    assert Tenants.parse(json.dumps(built["file"]["tenants"])) == Tenants.model_validate(
        TENANTS_FILE
    )
    assert built["file"]["dependencies"] == VALID["file"]["dependencies"]
    assert built["file"]["api_scopes"] == {"alice@acme.com": ["acme"]}
    assert built["empty_sections"]["tenants"] == {"tenants": {}}
    assert built["empty_sections"]["dependencies"] == {"default": {}}


# Each is refused by the variable's validation (and, for tenants, by relayflow too).
INVALID_TENANTS = {
    "bad_tenant_name": {"tenants": {"Acme": {}}},
    "bad_priority": {"default": {"priority": "urgent"}},
    "fractional_max_running": {"tenants": {"a": {"max_running": 1.5}}},
    "negative_max_running": {"tenants": {"a": {"max_running": -1}}},
    "too_many_running": {"tenants": {"a": {"max_running": 10001}}},
    "negative_rate": {"tenants": {"a": {"starts_per_s": -0.5}}},
}
INVALID_OTHERS: dict[str, dict[str, Any]] = {
    "bad_dependency_name": {"dependencies": {"dependencies": {"1api": {}}}},
    "failure_rate_over_1": {"dependencies": {"default": {"failure_rate": 1.5}}},
    "negative_budget": {"dependencies": {"dependencies": {"api": {"retry_budget": -0.1}}}},
    "no_probes": {"dependencies": {"dependencies": {"api": {"probes": 0}}}},
    "fractional_min_calls": {"dependencies": {"dependencies": {"api": {"min_calls": 2.5}}}},
    "empty_window": {"dependencies": {"dependencies": {"api": {"window_s": 0}}}},
    "max_open_under_open": {
        "dependencies": {"dependencies": {"api": {"open_s": 60, "max_open_s": 30}}}
    },
    "scope_not_an_email": {"api_scopes": {"alice": ["acme"]}},
    "scope_bad_tenant": {"api_scopes": {"alice@acme.com": ["Acme"]}},
}


@pytest.mark.parametrize("case", sorted(INVALID_TENANTS))
def test_relayflow_refuses_the_tenants_the_variable_refuses(case: str) -> None:
    with pytest.raises(ConfigError):
        Tenants.parse(json.dumps(INVALID_TENANTS[case]))


@needs_terraform
def test_the_variables_refuse_bad_names_and_out_of_range_values(tmp_path: Path) -> None:
    cases = {name: {"tenants": value} for name, value in INVALID_TENANTS.items()}
    cases |= INVALID_OTHERS
    output = _run(tmp_path, cases, ["plan"])
    refused = set(re.findall(r'module\.(\w+)\.var\.\w+|in module "(\w+)"', output))
    refused_names = {a or b for a, b in refused}
    assert refused_names == set(cases), (set(cases) - refused_names, output[-3000:])


# --- Documentation -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", env_dirs(), ids=[p.name for p in env_dirs()])
def test_the_tfvars_example_shows_tenants_dependencies_and_scopes(path: Path) -> None:
    text = (path / "terraform.tfvars.example").read_text(encoding="utf-8")
    for name in ISSUE_11:
        assert re.search(rf"^# {name}\s+=", text, re.M), name
    assert "tenants.json" in text
    # Commented out, the example is still a valid tfvars file that sets nothing new.
    with (path / "terraform.tfvars.example").open(encoding="utf-8") as handle:
        assert not set(ISSUE_11) & set(hcl2.load(handle))


def test_the_readme_shows_one_file_for_terraform_and_the_local_stack() -> None:
    readme = (MODULES.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Tenants and dependencies\n", 1)[1].split("\n## ", 1)[0]
    for needle in (
        'tenants = jsondecode(file("${path.module}/tenants.json"))',
        "relayflow local up --tenants tenants.json",
        "RELAYFLOW_TENANTS",
        "RELAYFLOW_DEPENDENCIES",
        "RELAYFLOW_API_SCOPES",
        'TF_VAR_tenants="$(cat tenants.json)"',
        "Function calls not allowed",
    ):
        assert needle in section, needle
