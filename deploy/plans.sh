#!/usr/bin/env bash
# Saves a plan (with what it was made from) to the state bucket, or fetches one back for the
# approved apply, refusing it if the apply build does not run the commit the plan was made at.
#
#   plans.sh save ENV STATE_BUCKET BUILD_ID COMMIT_SHA
#   plans.sh fetch ENV STATE_BUCKET PLAN_BUILD_ID COMMIT_SHA
set -euo pipefail

fail() {
    echo "plans: $*" >&2
    exit 1
}

[[ $# -eq 5 ]] || fail "usage: plans.sh save|fetch ENV STATE_BUCKET BUILD_ID COMMIT_SHA"
action=$1 env=$2 bucket=$3 build=$4 commit=$5
workspace=${WORKSPACE:-/workspace}
# The provider versions the plan was made with: a saved plan applies only with the same ones.
lock="infra/terraform/envs/${env}/.terraform.lock.hcl"
[[ -n "${build}" ]] || fail "no plan build id (_PLAN_BUILD_ID): run the plan trigger first and pass its build id"
saved="gs://${bucket}/plans/${env}/${build}"

case "${action}" in
    save)
        echo "${commit}" >"${workspace}/${env}.commit"
        gcloud storage cp "${workspace}/${env}.tfplan" "${workspace}/${env}.plan.txt" \
            "${workspace}/${env}.commit" "${workspace}/image.txt" "${lock}" "${saved}/"
        echo "plans: saved ${saved}; review ${env}.plan.txt there, then run the apply trigger with _PLAN_BUILD_ID=${build}"
        ;;
    fetch)
        gcloud storage cp "${saved}/${env}.tfplan" "${saved}/${env}.plan.txt" \
            "${saved}/${env}.commit" "${workspace}/" >/dev/null 2>&1 || fail "no saved plan at ${saved}"
        gcloud storage cp "${saved}/.terraform.lock.hcl" "${lock}" >/dev/null 2>&1 ||
            fail "no provider lock beside the plan at ${saved}"
        planned_at=$(cat "${workspace}/${env}.commit")
        # The plan embeds the configuration it was made from; applying it from another commit
        # would mix two versions of the modules.
        [[ "${planned_at}" == "${commit}" ]] ||
            fail "the plan was made at ${planned_at}, this build runs ${commit}: plan again"
        cat "${workspace}/${env}.plan.txt"
        ;;
    *) fail "unknown action '${action}': save or fetch" ;;
esac
