#!/usr/bin/env bash
# Cloud Build's test step: give a python:3.11 (Debian bookworm) image what `make test` needs —
# Java 17 and the Pub/Sub + Firestore emulators for the integration tests, terraform for
# `terraform fmt` in lint — then run it exactly as .ci/run does.
#
# Packages come from signed apt repositories; terraform is not downloaded here but copied out of
# the pinned hashicorp/terraform image by the build's terraform-binary step (TERRAFORM_BIN_DIR).
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

exec .ci/run
