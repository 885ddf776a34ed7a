#!/usr/bin/env bash
# The test build's test step (deploy/cloudbuild/test.yaml, as the test account): give a
# python:3.11 (Debian bookworm) image what `make test` needs — Java 17 and the Pub/Sub +
# Firestore emulators for the integration tests, terraform for `terraform fmt` in lint, the
# Python packages — then run it exactly as .ci/run does.
#
# Packages come from signed apt repositories; terraform is not downloaded here but copied out of
# the pinned hashicorp/terraform image by the build's terraform-binary step (TERRAFORM_BIN_DIR);
# every Python package is pinned by hash (requirements-dev.lock), and relayflow itself is
# installed from this checkout with nothing fetched. The Makefile's own install (an unhashed
# `pip install -e '.[dev]'`) is then already done: its stamp is newer than pyproject.toml.
set -euo pipefail

TERRAFORM_BIN_DIR="${TERRAFORM_BIN_DIR:-/workspace/.bin}"
[[ -x "${TERRAFORM_BIN_DIR}/terraform" ]] || {
    echo "ci-test: no ${TERRAFORM_BIN_DIR}/terraform (the terraform-binary step puts it there)" >&2
    exit 1
}
export PATH="${TERRAFORM_BIN_DIR}:${PATH}"

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    apt-transport-https ca-certificates curl gnupg make openjdk-17-jre-headless

curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg \
    | gpg --dearmor -o /usr/share/keyrings/cloud.google.gpg
echo "deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt cloud-sdk main" \
    > /etc/apt/sources.list.d/google-cloud-sdk.list
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    google-cloud-cli google-cloud-cli-pubsub-emulator google-cloud-cli-firestore-emulator

VENV="${VENV:-.venv}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
    -r requirements-dev.lock
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-index \
    --no-build-isolation -e .
"$VENV/bin/pip" check
touch "$VENV/.installed-stamp"

exec .ci/run
