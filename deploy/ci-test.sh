#!/usr/bin/env bash
# Cloud Build's test step: give a python:3.11 (Debian bookworm) image what `make test` needs —
# Java 17 and the Pub/Sub + Firestore emulators for the integration tests, terraform for
# `terraform fmt` in lint — then run it exactly as .ci/run does.
set -euo pipefail

TERRAFORM_VERSION="${TERRAFORM_VERSION:-1.11.4}"

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    apt-transport-https ca-certificates curl gnupg make unzip openjdk-17-jre-headless

curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg \
    | gpg --dearmor -o /usr/share/keyrings/cloud.google.gpg
echo "deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt cloud-sdk main" \
    > /etc/apt/sources.list.d/google-cloud-sdk.list
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    google-cloud-cli google-cloud-cli-pubsub-emulator google-cloud-cli-firestore-emulator

curl -fsSLo /tmp/terraform.zip \
    "https://releases.hashicorp.com/terraform/${TERRAFORM_VERSION}/terraform_${TERRAFORM_VERSION}_linux_amd64.zip"
unzip -q -o /tmp/terraform.zip terraform -d /usr/local/bin

exec .ci/run
