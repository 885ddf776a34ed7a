#!/bin/sh
# Plans an environment into a saved plan, or applies a saved plan: nothing is ever applied that
# was not planned first and saved. Runs in the hashicorp/terraform image (busybox sh).
#
#   PROJECT_ID=.. REGION=.. STATE_BUCKET=.. terraform.sh plan ENV    # needs $WORKSPACE/image.txt
#                                                                    # and $WORKSPACE/ENV.tfvars
#   STATE_BUCKET=.. terraform.sh apply ENV                           # applies $WORKSPACE/ENV.tfplan
set -eu

fail() {
    echo "terraform.sh: $*" >&2
    exit 1
}

[ $# -eq 2 ] || fail "usage: terraform.sh plan|apply ENV"
action=$1
env=$2
: "${STATE_BUCKET:?}"
: "${WORKSPACE:=/workspace}"
dir="infra/terraform/envs/${env}"
plan="${WORKSPACE}/${env}.tfplan"
[ -d "${dir}" ] || fail "no environment root ${dir}"

init() {
    terraform -chdir="${dir}" init -input=false -backend-config="bucket=${STATE_BUCKET}"
}

case "${action}" in
    plan)
        : "${PROJECT_ID:?}"
        : "${REGION:?}"
        image=$(cat "${WORKSPACE}/image.txt")
        # Only a digest names exactly the image that was tested; a tag can move.
        echo "${image}" | grep -Eq '^[a-z0-9.-]+-docker\.pkg\.dev/[^@:]+@sha256:[0-9a-f]{64}$' ||
            fail "image '${image}' is not an Artifact Registry image pinned by digest"
        init
        terraform -chdir="${dir}" plan -input=false -lock-timeout=300s \
            -var-file="${WORKSPACE}/${env}.tfvars" \
            -var="project_id=${PROJECT_ID}" -var="region=${REGION}" -var="image=${image}" \
            -out="${plan}"
        terraform -chdir="${dir}" show -no-color "${plan}" >"${WORKSPACE}/${env}.plan.txt"
        ;;
    apply)
        [ -f "${plan}" ] || fail "no saved plan ${plan}: plan first"
        init
        # A saved plan applies exactly what it shows, and Terraform refuses it if the state
        # changed since it was made.
        terraform -chdir="${dir}" apply -input=false -lock-timeout=300s "${plan}"
        ;;
    *) fail "unknown action '${action}': plan or apply" ;;
esac
