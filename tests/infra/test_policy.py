"""Policy exceptions: every checkov skip names its check and says why, where it applies; no CMEK
check is skipped on a store of flow data, and checkov sees an environment with CMEK on too."""

from __future__ import annotations

import re
from pathlib import Path

import hcl2
from tfconfig import REPO, TERRAFORM

SKIP = re.compile(r"checkov:skip=([A-Z_0-9]+)(?::(.*))?")


def _files() -> list[Path]:
    return [*TERRAFORM.rglob("*.tf"), REPO / "Dockerfile"]


def test_every_checkov_skip_is_justified_in_place() -> None:
    skips = [
        (path, match)
        for path in _files()
        for line in path.read_text(encoding="utf-8").splitlines()
        if (match := SKIP.search(line))
    ]
    assert skips, "the scan is expected to have a few justified exceptions"
    for path, match in skips:
        check, reason = match.group(1), (match.group(2) or "").strip()
        assert re.fullmatch(r"CKV2?_[A-Z]+_\d+", check), (path, check)
        assert len(reason.split()) >= 6, f"{path.name}: {check} needs a reason, not a label"


def test_a_skip_sits_inside_the_block_it_excuses() -> None:
    for path in TERRAFORM.rglob("*.tf"):
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if SKIP.search(line):
                above = [candidate for candidate in lines[:number] if candidate.strip()]
                opener = next(c for c in reversed(above) if not c.strip().startswith("#"))
                assert opener.rstrip().endswith("{") and opener.startswith("resource "), (
                    f"{path.name}:{number + 1}: a skip belongs right inside its resource block"
                )


# checkov's checks that a store is encrypted with a customer-managed key, for the types relayflow
# could hold flow data in (Pub/Sub topics; BigQuery datasets and tables). With the cmek option
# every store of flow data names its key, so none of them may be skipped. The image repository's
# (CKV_GCP_84) may: images hold relayflow's code, no flow data.
CMEK_CHECKS = {"CKV_GCP_83", "CKV_GCP_80", "CKV_GCP_81"}


def test_no_cmek_check_is_skipped_on_a_store_of_flow_data() -> None:
    skipped = {
        (path.relative_to(TERRAFORM).as_posix(), match.group(1))
        for path in TERRAFORM.rglob("*.tf")
        for match in SKIP.finditer(path.read_text(encoding="utf-8"))
        if match.group(1) in CMEK_CHECKS
    }
    assert skipped == set()


def test_the_policy_build_also_checks_an_environment_with_cmek_on() -> None:
    script = (REPO / "deploy" / "ci-checkov.sh").read_text(encoding="utf-8")
    assert "--directory infra/terraform/envs/prod --var-file deploy/checkov-cmek.tfvars" in script
    with (REPO / "deploy" / "checkov-cmek.tfvars").open(encoding="utf-8") as handle:
        values = hcl2.load(handle)
    assert values["cmek"]["enabled"] is True
    # Spelled out: checkov's rotation check (CKV_GCP_43) reads no optional attribute's default.
    assert values["cmek"]["rotation_period"].strip('"') == "7776000s"
