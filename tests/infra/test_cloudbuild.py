"""The build pipelines: isolation, one build promoted by digest, saved plans, approval for prod;
the tests as a build of their own, as an account that cannot deploy, with hashed test tools.

The YAML of the Cloud Build configs is read as Cloud Build reads it (step order and waitFor),
and the deploy/ scripts their steps run are executed here against fake gcloud and terraform
binaries, with a directory standing in for Cloud Storage.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tfconfig import MODULES, REPO, load

# The pipelines that deploy, as the environment's build account.
CONFIGS = {
    "build": REPO / "cloudbuild.yaml",
    "promote": REPO / "deploy" / "cloudbuild" / "promote.yaml",
    "apply": REPO / "deploy" / "cloudbuild" / "apply.yaml",
}
# dev's tests, as the test account.
TEST_CONFIG = REPO / "deploy" / "cloudbuild" / "test.yaml"
BUILD_ACCOUNT = (
    "projects/${PROJECT_ID}/serviceAccounts/relayflow-build@${PROJECT_ID}.iam.gserviceaccount.com"
)
TEST_ACCOUNT = (
    "projects/${PROJECT_ID}/serviceAccounts/relayflow-test@${PROJECT_ID}.iam.gserviceaccount.com"
)
DIGEST = "sha256:" + "ab" * 32


def _config(pipeline: str) -> dict[str, Any]:
    path = TEST_CONFIG if pipeline == "test" else CONFIGS[pipeline]
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def _steps(pipeline: str) -> dict[str, dict[str, Any]]:
    return {step["id"]: step for step in _config(pipeline)["steps"]}


def _waits_on(pipeline: str) -> dict[str, set[str]]:
    """Each step's transitive predecessors, as Cloud Build orders them: a step without waitFor
    waits for every step before it; waitFor ["-"] starts at once."""
    order = [s["id"] for s in _config(pipeline)["steps"]]
    steps = _steps(pipeline)
    direct = {
        sid: set(order[:i]) if "waitFor" not in steps[sid] else set(steps[sid]["waitFor"]) - {"-"}
        for i, sid in enumerate(order)
    }
    closure: dict[str, set[str]] = {}
    for sid in order:
        closure[sid] = (
            set().union(*(closure[d] | {d} for d in direct[sid])) if direct[sid] else set()
        )
    return closure


def _text(step: dict[str, Any]) -> str:
    return " ".join(str(a) for a in step.get("args", []))


# --- Every pipeline ---------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", sorted(CONFIGS))
def test_every_pipeline_runs_as_the_environments_own_build_account(pipeline: str) -> None:
    config = _config(pipeline)
    assert config["serviceAccount"] == BUILD_ACCOUNT
    # A user-specified account needs logs that are not in the default bucket.
    assert config["options"]["logging"] == "CLOUD_LOGGING_ONLY"


@pytest.mark.parametrize("pipeline", sorted(CONFIGS))
def test_every_pipeline_checks_environment_and_project_before_anything_else(pipeline: str) -> None:
    first = _config(pipeline)["steps"][0]
    assert first["id"] == "check-env"
    assert first["args"][:5] == [
        "deploy/check-env.sh",
        pipeline,
        "${_ENV}",
        "${PROJECT_ID}",
        "${_TF_STATE_BUCKET}",
    ]
    for step, before in _waits_on(pipeline).items():
        assert step == "check-env" or "check-env" in before, f"{step} may run before check-env"


@pytest.mark.parametrize("pipeline", sorted(CONFIGS))
def test_substitutions_are_declared_and_used(pipeline: str) -> None:
    text = CONFIGS[pipeline].read_text(encoding="utf-8")
    config = _config(pipeline)
    declared = set(config["substitutions"])
    used = set(re.findall(r"\$\{(_[A-Z_]+)\}", text))
    # Cloud Build refuses a build that uses an undeclared one or (unless told to allow it)
    # is passed one it does not use.
    assert used == declared
    loose = config["options"].get("substitutionOption") == "ALLOW_LOOSE"
    assert loose == (pipeline == "apply")


@pytest.mark.parametrize("pipeline", sorted(CONFIGS))
def test_nothing_is_applied_but_a_saved_plan(pipeline: str) -> None:
    config_text = CONFIGS[pipeline].read_text(encoding="utf-8")
    for text in [
        config_text,
        *(p.read_text(encoding="utf-8") for p in (REPO / "deploy").glob("*.sh")),
    ]:
        assert "-auto-approve" not in text
    for step in _steps(pipeline).values():
        if "terraform.sh" in _text(step):
            assert re.search(r"terraform\.sh[\"']?,? (plan|apply)", _text(step).replace('"', ""))


def test_triggers_pass_only_substitutions_their_config_uses() -> None:
    boot = load(MODULES / "bootstrap")
    common = set(boot.locals["common_substitutions"])
    files = {str(f.relative_to(REPO)): p for p, f in {**CONFIGS, "test": TEST_CONFIG}.items()}
    for env, triggers in boot.locals["triggers"].items():
        for name, trigger in triggers.items():
            config = _config(files[trigger["file"]])
            declared = set(config["substitutions"])
            extra = set(trigger["extra"])
            assert extra <= declared, (env, name, extra - declared)
            # Only the deploying builds get the environment's names (its state bucket).
            passed = common if trigger["account"] == "build" else set()
            if config["options"].get("substitutionOption") != "ALLOW_LOOSE":
                assert passed <= declared, (env, name, passed - declared)
            assert not (common & declared) or trigger["account"] == "build", (env, name)


def test_terraform_runs_from_a_pinned_image() -> None:
    for pipeline in [*CONFIGS, "test"]:
        image = _config(pipeline)["substitutions"]["_TERRAFORM_IMAGE"]
        assert re.fullmatch(r"hashicorp/terraform:\d+\.\d+\.\d+", image), image


# --- dev: build once --------------------------------------------------------------------------


def test_only_the_dev_pipeline_builds_and_it_records_provenance() -> None:
    build = _config("build")
    assert build["options"]["requestedVerifyOption"] == "VERIFIED"
    tag = next(a for a in _steps("build")["build"]["args"] if a.startswith("--tag="))
    assert build["images"] == [tag.removeprefix("--tag=")]
    assert tag.endswith(":git-${COMMIT_SHA}")
    for pipeline in ("promote", "apply"):
        assert "images" not in _config(pipeline)
        for step in _steps(pipeline).values():
            assert "cloud-builders/docker" not in step["name"], step["id"]
            assert not re.search(r"docker build|pip install|ci-test\.sh", _text(step)), step["id"]
    # Promotion runs the image it promotes (the versions check), by that digest only.
    (runs,) = [s for s in _steps("promote").values() if ".pkg.dev/" in s["name"]]
    assert runs["name"].endswith("/relayflow@${_IMAGE_DIGEST}")


def test_dev_pushes_only_what_passed_and_plans_with_the_pushed_digest() -> None:
    waits = _waits_on("build")
    assert {"tested", "build"} <= waits["push"]
    assert "RepoDigests" in _text(_steps("build")["push"])
    assert {"push", "fetch-tfvars"} <= waits["plan"]
    assert "plan" in waits["apply"]
    # The commit's tests passed, in their own build: the gate waits for that build's end.
    assert _steps("build")["tested"]["args"] == [
        "deploy/await-tests.sh",
        "${PROJECT_ID}",
        "${_REGION}",
        "${COMMIT_SHA}",
    ]


def test_the_deploying_build_installs_and_runs_no_test_tool() -> None:
    # Cloud Build gives a whole build one account; the tests install third-party tools, so
    # they run in a build of their own as an account that cannot deploy.
    for pipeline in CONFIGS:
        for step in _steps(pipeline).values():
            text = _text(step)
            assert not re.search(r"pip install|ci-test\.sh|ci-checkov\.sh|checkov", text), (
                pipeline,
                step["id"],
            )
    assert "_CHECKOV_VERSION" not in _config("build")["substitutions"]


# --- dev: the tests, as the test account ------------------------------------------------------


def test_the_tests_run_as_the_test_account_and_touch_no_environment() -> None:
    config = _config("test")
    assert config["serviceAccount"] == TEST_ACCOUNT
    assert config["options"]["logging"] == "CLOUD_LOGGING_ONLY"
    text = TEST_CONFIG.read_text(encoding="utf-8")
    for never in ("_TF_STATE_BUCKET", "_ENV", "terraform.sh", "docker", "gcloud", "images:"):
        assert never not in text.split("# In the shell scripts", 1)[1], never
    assert "images" not in config
    assert set(config["substitutions"]) == {"_TERRAFORM_IMAGE", "_CHECKOV_VERSION"}
    steps = _steps("test")
    assert steps["test"]["args"] == ["deploy/ci-test.sh"]
    assert steps["checkov"]["args"] == ["deploy/ci-checkov.sh", "${_CHECKOV_VERSION}"]
    assert "terraform-binary" in _waits_on("test")["test"]
    # How the deploying build finds it: by its commit.
    assert config["tags"] == ["relayflow-test", "commit-${COMMIT_SHA}"]
    gate = (REPO / "deploy" / "await-tests.sh").read_text(encoding="utf-8")
    assert 'tags=\\"relayflow-test\\" AND tags=\\"commit-${commit}\\"' in gate


def test_every_package_the_tests_install_is_pinned_by_hash() -> None:
    ci_test = (REPO / "deploy" / "ci-test.sh").read_text(encoding="utf-8")
    ci_checkov = (REPO / "deploy" / "ci-checkov.sh").read_text(encoding="utf-8")
    assert "--require-hashes --no-deps \\\n    -r requirements-dev.lock" in ci_test
    assert "--no-deps --no-index \\\n    --no-build-isolation -e ." in ci_test
    assert 'pip" check' in ci_test
    # make's own install is skipped: its stamp is made newer than pyproject.toml.
    assert 'touch "$VENV/.installed-stamp"' in ci_test and ci_test.rstrip().endswith("exec .ci/run")
    assert "STAMP := $(VENV)/.installed-stamp" in (REPO / "Makefile").read_text(encoding="utf-8")
    assert '--require-hashes -r "$lock"' in ci_checkov
    for script in (ci_test, ci_checkov):
        for line in script.splitlines():
            if "pip" in line and " install" in line and not line.lstrip().startswith("#"):
                assert "--require-hashes" in line or "--no-index" in line, line
    version = _config("test")["substitutions"]["_CHECKOV_VERSION"]
    lock = (REPO / "deploy" / "requirements-checkov.lock").read_text(encoding="utf-8")
    assert f"\ncheckov=={version} \\\n" in lock
    for path in (REPO / "requirements-dev.lock", REPO / "deploy" / "requirements-checkov.lock"):
        _assert_hashed(path.read_text(encoding="utf-8"), path.name)


def _assert_hashed(lock: str, name: str) -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.split("\n\n", 1)[-1].strip())
    entries = [e for e in entries if e.strip() and not e.startswith("#")]
    assert entries, name
    for entry in entries:
        assert re.match(r"[A-Za-z0-9._-]+==\S+ \\\n", entry), (name, entry.splitlines()[0])
        assert "--hash=sha256:" in entry, (name, entry.splitlines()[0])


def _pins(text: str) -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\]+)", text, re.M)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pins}


def test_the_tests_run_the_dependency_versions_the_image_runs_and_every_dev_tool() -> None:
    image = _pins((REPO / "requirements.lock").read_text(encoding="utf-8"))
    tests = _pins((REPO / "requirements-dev.lock").read_text(encoding="utf-8"))
    assert {k: tests.get(k) for k in image} == image, "run deploy/lock-test-tools.sh"
    project = yaml.safe_load(json.dumps(_pyproject()))
    for requirement in project["project"]["optional-dependencies"]["dev"]:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        assert re.sub(r"[-_.]+", "-", name).lower() in tests, name


def _pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


# --- staging and prod: promote the digest ------------------------------------------------------


def test_promotion_copies_the_upstream_digest_then_plans_and_saves_the_plan() -> None:
    steps, waits = _steps("promote"), _waits_on("promote")
    assert steps["promote"]["args"] == [
        "deploy/promote.sh",
        "${_SOURCE_REPOSITORY}",
        "${_IMAGE_DIGEST}",
        "${_REGION}-docker.pkg.dev/${PROJECT_ID}/${_REPOSITORY}",
    ]
    assert "promote" in waits["plan"] and "plan" in waits["save-plan"]
    assert "save-plan" in waits["apply"]
    assert 'if [ "${_AUTO_APPLY}" = true ]' in _text(steps["apply"])
    # check-env refuses _AUTO_APPLY=true for prod (tested on the script below).
    assert steps["check-env"]["args"][5] == "${_AUTO_APPLY}"


@pytest.mark.parametrize("pipeline", ["build", "promote"])
def test_no_plan_is_made_before_the_app_is_checked_against_the_flows_running_here(
    pipeline: str,
) -> None:
    steps, waits = _steps(pipeline), _waits_on(pipeline)
    assert steps["api-access"]["args"] == [
        "deploy/api-access.sh",
        "${PROJECT_ID}",
        "${_REGION}",
        "/workspace/api-access.env",
    ]
    check = steps["versions-check"]
    assert check["entrypoint"] == "sh"
    app = "${_APP}" if pipeline == "build" else ""
    assert check["args"] == [
        "deploy/versions-check.sh",
        "/workspace/api-access.env",
        "/workspace/${_ENV}.tfvars",
        app,
        "${_VERSIONS_CHECK}",
    ]
    assert {"api-access", "fetch-tfvars"} <= waits["versions-check"]
    assert "versions-check" in waits["plan"] and "plan" in waits["apply"]
    assert _config(pipeline)["substitutions"]["_VERSIONS_CHECK"] == "check"
    # The check loads the app from the image being deployed: the one built here (once its
    # commit's tests passed), or the digest promoted.
    if pipeline == "build":
        built = next(a for a in steps["build"]["args"] if a.startswith("--tag="))
        assert check["name"] == built.removeprefix("--tag=")
        assert {"build", "tested"} <= waits["versions-check"]
    else:
        assert check["name"].endswith("/relayflow@${_IMAGE_DIGEST}")
        assert "promote" in waits["versions-check"]


def test_the_approved_apply_applies_the_saved_plan_of_its_own_commit_and_never_plans() -> None:
    steps, waits = _steps("apply"), _waits_on("apply")
    assert steps["fetch-plan"]["args"] == [
        "deploy/plans.sh",
        "fetch",
        "${_ENV}",
        "${_TF_STATE_BUCKET}",
        "${_PLAN_BUILD_ID}",
        "${COMMIT_SHA}",
    ]
    assert "fetch-plan" in waits["apply"]
    assert not any(a == "plan" for s in steps.values() for a in s.get("args", []))


# --- The scripts, against fake gcloud and terraform ---------------------------------------------

FAKE_GCLOUD = r"""#!/usr/bin/env bash
# A fake gcloud: logs its arguments; $FAKE_GCS/<bucket>/<path> stands for gs://<bucket>/<path>.
echo "gcloud $*" >> "$FAKE_LOG"
gs() { echo "$FAKE_GCS/${1#gs://}"; }
case "$1 $2" in
  "storage cat") f=$(gs "$3"); [[ -f "$f" ]] && cat "$f" || exit 1 ;;
  "storage cp")
    args=("${@:3}"); dest="${args[-1]}"; unset 'args[-1]'
    for src in "${args[@]}"; do
      if [[ "$src" == gs://* ]]; then
        f=$(gs "$src"); [[ -f "$f" ]] || exit 1
        if [[ -d "$dest" ]]; then cp "$f" "$dest/"; else cp "$f" "$dest"; fi
      else
        d=$(gs "$dest"); mkdir -p "$d"; cp "$src" "$d/"
      fi
    done ;;
  "artifacts docker")
    if [[ " $* " == *" --show-provenance "* ]]; then
      [[ -n "${FAKE_PROVENANCE:-}" ]] && echo "$FAKE_PROVENANCE" || exit 1
    else
      echo "${FAKE_COPIED_DIGEST:-}"
    fi ;;
  "container images") ;;
  "run services") [[ -z "${FAKE_RUN_FAILS:-}" ]] || exit 1; echo "${FAKE_SERVICES:-}" ;;
  "projects describe") echo "${FAKE_PROJECT_NUMBER:-}" ;;
  "auth print-identity-token") echo "${FAKE_TOKEN:-}" ;;
  "builds list")
    # One line of comma-separated statuses per call, from $FAKE_BUILDS (the last one repeats).
    n=$(($(cat "$FAKE_LOG.builds" 2>/dev/null || echo 0) + 1)); echo "$n" > "$FAKE_LOG.builds"
    line=$(sed -n "${n}p" "$FAKE_BUILDS"); [[ -n "$line" ]] || line=$(tail -n1 "$FAKE_BUILDS")
    tr ',' '\n' <<<"$line" | sed '/^$/d' ;;
  *) echo "fake gcloud: unexpected $*" >&2; exit 2 ;;
esac
"""

FAKE_RELAYFLOW = r"""#!/bin/sh
echo "relayflow $* url=${RELAYFLOW_API_URL:-} token=${RELAYFLOW_API_TOKEN:-}" >> "$FAKE_LOG"
exit "${FAKE_RELAYFLOW_EXIT:-0}"
"""

FAKE_TERRAFORM = r"""#!/bin/sh
echo "terraform $*" >> "$FAKE_LOG"
for a in "$@"; do
  case "$a" in -out=*) echo plan > "${a#-out=}" ;; esac
done
case " $* " in *" show "*) echo "Plan: 3 to add, 0 to change, 0 to destroy." ;; esac
"""


class Sandbox:
    """A workspace with the repository's deploy scripts, fake gcloud/terraform and fake GCS."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = root / "workspace"
        self.gcs = root / "gcs"
        self.log = root / "calls.log"
        self.bin = root / "bin"
        for d in (self.workspace, self.gcs, self.bin):
            d.mkdir()
        fakes = (
            ("gcloud", FAKE_GCLOUD),
            ("terraform", FAKE_TERRAFORM),
            ("relayflow", FAKE_RELAYFLOW),
        )
        for name, body in fakes:
            (self.bin / name).write_text(body, encoding="utf-8")
            (self.bin / name).chmod(0o755)
        self.log.touch()
        self.env: dict[str, str] = {}

    def put(self, gs_path: str, content: str) -> None:
        path = self.gcs / gs_path.removeprefix("gs://")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")

    def mark(self, bucket: str, environment: str, project: str) -> None:
        marker = json.dumps(
            {"environment": environment, "project_id": project}, separators=(",", ":")
        )
        self.put(f"{bucket}/relayflow/environment.json", marker)

    def run(self, *argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "FAKE_LOG": str(self.log),
            "FAKE_GCS": str(self.gcs),
            "WORKSPACE": str(self.workspace),
            **self.env,
        }
        # The scripts that run in the terraform image and in relayflow's have no bash.
        shell = "sh" if argv[0] in ("terraform.sh", "versions-check.sh") else "bash"
        return subprocess.run(
            [shell, str(REPO / "deploy" / argv[0]), *argv[1:]],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )

    def calls(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    yield Sandbox(tmp_path)


def test_check_env_passes_when_pipeline_environment_project_and_bucket_belong_together(
    sandbox: Sandbox,
) -> None:
    sandbox.mark("dev-state", "dev", "rf-dev")
    result = sandbox.run("check-env.sh", "build", "dev", "rf-dev", "dev-state")
    assert result.returncode == 0, result.stderr
    assert sandbox.calls() == ["gcloud storage cat gs://dev-state/relayflow/environment.json"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # _ENV=prod submitted in the dev project, with the dev project's bucket.
        (("promote", "prod", "rf-dev", "dev-state"), "holds environment 'dev', not _ENV=prod"),
        # The right environment name, the wrong project's bucket.
        (("build", "dev", "rf-other", "dev-state"), "belongs to project 'rf-dev'"),
        # Another environment's bucket this build's account cannot read.
        (("build", "dev", "rf-dev", "prod-state"), "cannot read gs://prod-state"),
        (("build", "dev", "rf-dev", ""), "_TF_STATE_BUCKET is empty"),
        (("build", "qa", "rf-dev", "dev-state"), "_ENV must be dev, staging or prod"),
        (("build", "staging", "rf-staging", "dev-state"), "only dev builds images"),
        (("promote", "dev", "rf-dev", "dev-state"), "dev deploys what it builds"),
        (("promote", "prod", "rf-prod", "prod-state", "true"), "prod applies only a saved plan"),
    ],
)
def test_check_env_refuses_a_mismatch_before_any_plan(
    sandbox: Sandbox, argv: tuple[str, ...], message: str
) -> None:
    sandbox.mark("dev-state", "dev", "rf-dev")
    result = sandbox.run("check-env.sh", *argv)
    assert result.returncode == 1
    assert message in result.stderr
    assert not any(c.startswith("terraform") for c in sandbox.calls())


def test_fetch_tfvars_refuses_a_missing_file_and_one_of_another_project(sandbox: Sandbox) -> None:
    dest = str(sandbox.workspace / "dev.tfvars")
    missing = sandbox.run("fetch-tfvars.sh", "dev", "rf-dev", "dev-state", dest)
    assert (
        missing.returncode == 1
        and "no gs://dev-state/relayflow/dev/terraform.tfvars" in missing.stderr
    )
    sandbox.put("dev-state/relayflow/dev/terraform.tfvars", 'project_id = "rf-prod"\n')
    other = sandbox.run("fetch-tfvars.sh", "dev", "rf-dev", "dev-state", dest)
    assert other.returncode == 1 and "names project_id 'rf-prod'" in other.stderr
    sandbox.put("dev-state/relayflow/dev/terraform.tfvars", 'project_id = "rf-dev"\n')
    assert sandbox.run("fetch-tfvars.sh", "dev", "rf-dev", "dev-state", dest).returncode == 0
    assert Path(dest).read_text(encoding="utf-8") == 'project_id = "rf-dev"\n'


def _plan_env(sandbox: Sandbox, image: str) -> None:
    (sandbox.workspace / "image.txt").write_text(image + "\n", encoding="utf-8")
    (sandbox.workspace / "dev.tfvars").write_text("", encoding="utf-8")
    sandbox.env.update(PROJECT_ID="rf-dev", REGION="us-central1", STATE_BUCKET="dev-state")


def test_terraform_plans_only_an_image_pinned_by_digest(sandbox: Sandbox) -> None:
    _plan_env(sandbox, "us-central1-docker.pkg.dev/rf-dev/relayflow/relayflow:latest")
    result = sandbox.run("terraform.sh", "plan", "dev")
    assert (
        result.returncode == 1
        and "not an Artifact Registry image pinned by digest" in result.stderr
    )
    assert sandbox.calls() == []


def test_terraform_plans_into_a_saved_plan_and_applies_only_that(sandbox: Sandbox) -> None:
    image = f"us-central1-docker.pkg.dev/rf-dev/relayflow/relayflow@{DIGEST}"
    _plan_env(sandbox, image)
    plan_file = sandbox.workspace / "dev.tfplan"
    assert sandbox.run("terraform.sh", "apply", "dev").returncode == 1, "no plan yet"
    assert sandbox.run("terraform.sh", "plan", "dev").returncode == 0
    assert sandbox.run("terraform.sh", "apply", "dev").returncode == 0
    env_dir = "-chdir=infra/terraform/envs/dev"
    init = f"terraform {env_dir} init -input=false -backend-config=bucket=dev-state"
    plan = (
        f"terraform {env_dir} plan -input=false -lock-timeout=300s"
        f" -var-file={sandbox.workspace}/dev.tfvars -var=project_id=rf-dev"
        f" -var=region=us-central1 -var=image={image} -out={plan_file}"
    )
    assert sandbox.calls() == [
        init,
        plan,
        f"terraform {env_dir} show -no-color {plan_file}",
        init,
        f"terraform {env_dir} apply -input=false -lock-timeout=300s {plan_file}",
    ]
    assert "Plan: 3 to add" in (sandbox.workspace / "dev.plan.txt").read_text(encoding="utf-8")


SOURCE = "us-central1-docker.pkg.dev/rf-dev/relayflow"
TARGET = "us-central1-docker.pkg.dev/rf-staging/relayflow"


@pytest.mark.parametrize(
    ("digest", "provenance", "copied", "message"),
    [
        ("latest", "{}", DIGEST, "_IMAGE_DIGEST must be sha256:<64 hex>"),
        (DIGEST, "", DIGEST, "cannot read"),
        (DIGEST, '{"image_summary": {}}', DIGEST, "has no build provenance"),
        (DIGEST, '{"provenance_summary": {}}', "sha256:" + "cd" * 32, "the copy has digest"),
    ],
)
def test_promotion_refuses_anything_but_the_same_digest_with_provenance(
    sandbox: Sandbox, digest: str, provenance: str, copied: str, message: str
) -> None:
    sandbox.env.update(FAKE_PROVENANCE=provenance, FAKE_COPIED_DIGEST=copied)
    result = sandbox.run("promote.sh", SOURCE, digest, TARGET)
    assert result.returncode == 1 and message in result.stderr
    assert not (sandbox.workspace / "image.txt").exists()


def test_promotion_copies_the_digest_and_names_the_copy_by_digest(sandbox: Sandbox) -> None:
    sandbox.env.update(FAKE_PROVENANCE='{"provenance_summary": {}}', FAKE_COPIED_DIGEST=DIGEST)
    result = sandbox.run("promote.sh", SOURCE, DIGEST, TARGET)
    assert result.returncode == 0, result.stderr
    image = (sandbox.workspace / "image.txt").read_text(encoding="utf-8").strip()
    assert image == f"{TARGET}/relayflow@{DIGEST}"
    source, target = f"{SOURCE}/relayflow@{DIGEST}", f"{TARGET}/relayflow:promoted-{DIGEST[7:]}"
    assert f"gcloud container images add-tag --quiet {source} {target}" in sandbox.calls()


def test_a_saved_plan_is_applied_only_from_the_commit_it_was_made_at(sandbox: Sandbox) -> None:
    files = (("prod.tfplan", "plan"), ("prod.plan.txt", "Plan: 1 to add"), ("image.txt", "img"))
    for name, content in files:
        (sandbox.workspace / name).write_text(content, encoding="utf-8")
    # A checkout of its own: the scripts run from the repository root of the build.
    checkout = sandbox.root / "checkout"
    lock = checkout / "infra" / "terraform" / "envs" / "prod" / ".terraform.lock.hcl"
    lock.parent.mkdir(parents=True)
    lock.write_text("# providers\n", encoding="utf-8")
    saved = sandbox.run("plans.sh", "save", "prod", "prod-state", "b-123", "c0ffee", cwd=checkout)
    assert saved.returncode == 0, saved.stderr
    for name in ("prod.tfplan", ".terraform.lock.hcl"):
        assert (sandbox.gcs / "prod-state/plans/prod/b-123" / name).exists(), name
    for name in ("prod.tfplan", "prod.plan.txt", "prod.commit"):
        (sandbox.workspace / name).unlink()
    lock.unlink()
    moved = sandbox.run(
        "plans.sh", "fetch", "prod", "prod-state", "b-123", "deadbeef", cwd=checkout
    )
    assert moved.returncode == 1 and "the plan was made at c0ffee" in moved.stderr
    fetched = sandbox.run(
        "plans.sh", "fetch", "prod", "prod-state", "b-123", "c0ffee", cwd=checkout
    )
    assert fetched.returncode == 0 and "Plan: 1 to add" in fetched.stdout
    assert (sandbox.workspace / "prod.tfplan").exists()
    # Applied with the provider versions it was planned with.
    assert lock.read_text(encoding="utf-8") == "# providers\n"
    no_build = sandbox.run("plans.sh", "fetch", "prod", "prod-state", "", "c0ffee", cwd=checkout)
    assert no_build.returncode == 1


# --- The dev deploy waits for the tests of its commit --------------------------------------------

COMMIT = "c0ffee" + "0" * 34


def _await(sandbox: Sandbox, *calls: str, commit: str = COMMIT) -> subprocess.CompletedProcess[str]:
    builds = sandbox.root / "builds.txt"
    builds.write_text("\n".join(calls) + "\n", encoding="utf-8")
    sandbox.env.update(FAKE_BUILDS=str(builds), AWAIT_POLL_S="0", AWAIT_POLLS="5")
    return sandbox.run("await-tests.sh", "rf-dev", "us-central1", commit)


@pytest.mark.parametrize(
    ("calls", "passes", "says"),
    [
        (("", "QUEUED", "WORKING", "SUCCESS"), True, "the tests of c0ffee"),
        (("WORKING", "FAILURE"), False, "ended FAILURE; nothing is pushed"),
        (("TIMEOUT",), False, "ended TIMEOUT"),
        (("CANCELLED",), False, "ended CANCELLED"),
        # A test build retried after a failure counts once it succeeds.
        (("FAILURE,QUEUED", "SUCCESS,FAILURE"), True, "passed"),
        # No test build of this commit at all (the test trigger did not run): no push.
        (("",), False, "no test build of c0ffee"),
        (("WORKING",), False, "after 5 polls"),
    ],
    ids=["passed", "failed", "timed-out", "cancelled", "retried", "none", "still-running"],
)
def test_the_deploy_goes_on_only_once_the_test_build_of_its_commit_succeeded(
    sandbox: Sandbox, calls: tuple[str, ...], passes: bool, says: str
) -> None:
    result = _await(sandbox, *calls)
    assert (result.returncode == 0) is passes, result.stderr
    assert says in (result.stdout + result.stderr)
    listed = [c for c in sandbox.calls() if c.startswith("gcloud builds list")]
    assert 1 <= len(listed) <= 5
    assert all(
        f'--filter=tags="relayflow-test" AND tags="commit-{COMMIT}"' in c
        and "--project=rf-dev --region=us-central1" in c
        for c in listed
    )


def test_the_gate_refuses_a_build_without_a_commit(sandbox: Sandbox) -> None:
    result = _await(sandbox, "SUCCESS", commit="")
    assert result.returncode == 1 and "is not a commit" in result.stderr
    assert sandbox.calls() == []


# --- The versions check before a deploy ---------------------------------------------------------


def test_api_access_finds_no_api_on_a_first_deploy_and_leaves_nothing_to_check(
    sandbox: Sandbox,
) -> None:
    out = sandbox.workspace / "api-access.env"
    result = sandbox.run("api-access.sh", "rf-dev", "us-central1", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text(encoding="utf-8") == ""
    assert "a first deploy" in result.stdout
    assert not any("print-identity-token" in c for c in sandbox.calls())


def test_api_access_writes_the_apis_own_url_and_a_token_minted_for_it(sandbox: Sandbox) -> None:
    sandbox.env |= {"FAKE_SERVICES": "api", "FAKE_PROJECT_NUMBER": "123", "FAKE_TOKEN": "t.k.n"}
    out = sandbox.workspace / "api-access.env"
    result = sandbox.run("api-access.sh", "rf-dev", "us-central1", str(out))
    assert result.returncode == 0, result.stderr
    url = "https://api-123.us-central1.run.app"
    assert out.read_text(encoding="utf-8") == (
        f"RELAYFLOW_API_URL={url}\nRELAYFLOW_API_TOKEN=t.k.n\n"
    )
    assert f"gcloud auth print-identity-token --audiences={url}" in sandbox.calls()


def test_api_access_stops_the_build_when_it_cannot_tell_whether_an_api_exists(
    sandbox: Sandbox,
) -> None:
    sandbox.env |= {"FAKE_RUN_FAILS": "1"}
    out = sandbox.workspace / "api-access.env"
    result = sandbox.run("api-access.sh", "rf-dev", "us-central1", str(out))
    assert result.returncode == 1
    assert "cannot list the Cloud Run services" in result.stderr


def _access(sandbox: Sandbox) -> Path:
    access = sandbox.workspace / "api-access.env"
    access.write_text(
        "RELAYFLOW_API_URL=https://api-1.r.run.app\nRELAYFLOW_API_TOKEN=tok\n", encoding="utf-8"
    )
    return access


@pytest.mark.parametrize("refused", [False, True])
def test_the_check_runs_against_the_environments_app_and_its_answer_is_the_steps(
    sandbox: Sandbox, refused: bool
) -> None:
    access, tfvars = _access(sandbox), sandbox.workspace / "dev.tfvars"
    tfvars.write_text('project_id = "rf-dev"\napp = "team.flows:registry"\n', encoding="utf-8")
    sandbox.env |= {"FAKE_RELAYFLOW_EXIT": "1" if refused else "0"}
    result = sandbox.run("versions-check.sh", str(access), str(tfvars), "default.app:reg", "check")
    assert result.returncode == (1 if refused else 0)
    assert sandbox.calls() == [
        "relayflow versions check --app team.flows:registry url=https://api-1.r.run.app token=tok"
    ]
    assert not access.exists(), "the token is gone once read"


def test_without_an_app_in_the_tfvars_the_check_takes_the_builds(sandbox: Sandbox) -> None:
    access = _access(sandbox)
    result = sandbox.run("versions-check.sh", str(access), "/nonexistent.tfvars", "a.b:c")
    assert result.returncode == 0, result.stderr
    assert sandbox.calls()[0].startswith("relayflow versions check --app a.b:c ")


@pytest.mark.parametrize(
    ("content", "mode", "says"),
    [
        ("", "check", "no api deployed yet"),
        ("RELAYFLOW_API_URL=x\n", "skip", "skipped (_VERSIONS_CHECK=skip)"),
    ],
)
def test_a_first_deploy_or_a_skip_runs_no_check(
    sandbox: Sandbox, content: str, mode: str, says: str
) -> None:
    access = sandbox.workspace / "api-access.env"
    access.write_text(content, encoding="utf-8")
    result = sandbox.run("versions-check.sh", str(access), "/nonexistent.tfvars", "a.b:c", mode)
    assert result.returncode == 0, result.stderr
    assert says in result.stdout
    assert sandbox.calls() == []


def test_a_missing_access_file_or_a_bad_mode_stops_the_build(sandbox: Sandbox) -> None:
    gone = sandbox.run("versions-check.sh", "/nonexistent.env", "/x.tfvars", "a.b:c")
    assert gone.returncode == 1 and "deploy/api-access.sh runs first" in gone.stderr
    access = _access(sandbox)
    bad = sandbox.run("versions-check.sh", str(access), "/x.tfvars", "a.b:c", "maybe")
    assert bad.returncode == 1 and "check or skip, not 'maybe'" in bad.stderr
