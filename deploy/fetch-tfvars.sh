#!/usr/bin/env bash
# Copies an environment's terraform.tfvars from its state bucket into the workspace, and refuses
# to go on without it: the environment roots have required variables no default can stand for.
#
#   fetch-tfvars.sh ENV PROJECT_ID STATE_BUCKET DEST
set -euo pipefail

fail() {
    echo "fetch-tfvars: $*" >&2
    exit 1
}

[[ $# -eq 4 ]] || fail "usage: fetch-tfvars.sh ENV PROJECT_ID STATE_BUCKET DEST"
env=$1 project=$2 bucket=$3 dest=$4
src="gs://${bucket}/relayflow/${env}/terraform.tfvars"

gcloud storage cp "${src}" "${dest}" >/dev/null 2>&1 ||
    fail "no ${src}: upload one (infra/terraform/envs/${env}/terraform.tfvars.example shows what it holds)"

# project_id comes from the build (-var wins over the file); a different one in the file means
# the file belongs to another environment.
named=$(sed -n 's/^[[:space:]]*project_id[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "${dest}")
if [[ -n "${named}" && "${named}" != "${project}" ]]; then
    fail "${src} names project_id '${named}', this build runs in '${project}'"
fi
echo "fetch-tfvars: ${src}"
