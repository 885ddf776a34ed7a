#!/usr/bin/env bash
# The test build's policy checks (deploy/cloudbuild/test.yaml): checkov on the Terraform and the
# Dockerfile, installed into a venv of its own from its hashed lock, at the version the build
# names.
set -euo pipefail
version="${1:?usage: ci-checkov.sh CHECKOV_VERSION}"
lock=deploy/requirements-checkov.lock
grep -q "^checkov==${version} " "$lock" || {
    echo "ci-checkov: ${lock} does not pin checkov==${version}; run deploy/lock-test-tools.sh" >&2
    exit 1
}
python3 -m venv /tmp/checkov
/tmp/checkov/bin/pip install --quiet --disable-pip-version-check --require-hashes -r "$lock"
/tmp/checkov/bin/checkov --directory infra/terraform --framework terraform --compact --quiet
# prod again with CMEK on: the option's key grants exist only then.
/tmp/checkov/bin/checkov --directory infra/terraform/envs/prod --var-file deploy/checkov-cmek.tfvars \
    --framework terraform --compact --quiet
/tmp/checkov/bin/checkov --file Dockerfile --framework dockerfile --compact --quiet
