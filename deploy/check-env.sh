#!/usr/bin/env bash
# Refuses a build whose environment, project and state bucket do not belong together, or whose
# pipeline is not the one this environment runs, before anything reads Terraform state or plans.
#
#   check-env.sh PIPELINE ENV PROJECT_ID STATE_BUCKET [AUTO_APPLY]
#
# PIPELINE is build (cloudbuild.yaml: dev only, the one place an image is built), promote
# (staging and prod take dev's digest; prod never applies without approval) or apply (a saved
# plan, after approval).
#
# The bootstrap of each environment wrote gs://STATE_BUCKET/relayflow/environment.json naming its
# environment and project; only that environment's build account can read it. A build submitted
# with _ENV=prod in the dev project, or pointed at another environment's bucket, stops here.
set -euo pipefail

fail() {
    echo "check-env: $*" >&2
    exit 1
}

[[ $# -eq 4 || $# -eq 5 ]] || fail "usage: check-env.sh PIPELINE ENV PROJECT_ID STATE_BUCKET [AUTO_APPLY]"
pipeline=$1 env=$2 project=$3 bucket=$4 auto_apply=${5:-false}

case "${env}" in
    dev | staging | prod) ;;
    *) fail "_ENV must be dev, staging or prod, got '${env}'" ;;
esac
case "${pipeline}/${env}" in
    build/dev | promote/staging | promote/prod | apply/staging | apply/prod) ;;
    build/*) fail "only dev builds images; ${env} promotes a digest dev built (deploy/cloudbuild/promote.yaml)" ;;
    promote/dev | apply/dev) fail "dev deploys what it builds (cloudbuild.yaml)" ;;
    *) fail "unknown pipeline '${pipeline}'" ;;
esac
[[ "${auto_apply}" == true || "${auto_apply}" == false ]] || fail "_AUTO_APPLY must be true or false"
if [[ "${env}" == prod && "${auto_apply}" == true ]]; then
    fail "prod applies only a saved plan after approval: _AUTO_APPLY must be false"
fi
[[ -n "${bucket}" ]] || fail "_TF_STATE_BUCKET is empty: the trigger sets it (infra/terraform/bootstrap)"
[[ -d "infra/terraform/envs/${env}" ]] || fail "no environment root infra/terraform/envs/${env}"

marker="gs://${bucket}/relayflow/environment.json"
if ! content=$(gcloud storage cat "${marker}" 2>/dev/null); then
    fail "cannot read ${marker}: not this project's state bucket, or the environment was never bootstrapped"
fi
# The marker is one line of JSON written by Terraform's jsonencode: {"environment":"..","project_id":".."}.
marked_env=$(sed -n 's/.*"environment":"\([^"]*\)".*/\1/p' <<<"${content}")
marked_project=$(sed -n 's/.*"project_id":"\([^"]*\)".*/\1/p' <<<"${content}")

[[ "${marked_project}" == "${project}" ]] ||
    fail "${marker} belongs to project '${marked_project}', this build runs in '${project}'"
[[ "${marked_env}" == "${env}" ]] ||
    fail "project ${project} holds environment '${marked_env}', not _ENV=${env}"
echo "check-env: ${env} in ${project}, state in gs://${bucket}"
