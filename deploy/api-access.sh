#!/usr/bin/env bash
# Before a deploy, what `relayflow versions check` needs to ask the environment's api how many
# flows run on each version (deploy/versions-check.sh, in the next step): the api's URL and an
# ID token of this build's account for it (the api lists the build account among its viewers).
# With no api deployed yet (a first deploy), no flow can run on any version: the file is left
# empty, and the check says so and passes.
#
#   api-access.sh PROJECT_ID REGION OUT
#
# The token is written for the next step only, which runs the image being deployed as its own
# user (so the file must be readable by it) and deletes it; every step of a build runs as the
# same account anyway.
set -euo pipefail

fail() {
    echo "api-access: $*" >&2
    exit 1
}

[[ $# -eq 3 ]] || fail "usage: api-access.sh PROJECT_ID REGION OUT"
project=$1 region=$2 out=$3

# A listing, not `describe`: an absent api is an empty answer, any other failure stops the build
# (a check skipped because of a transient error would let a bad deploy through).
found=$(gcloud run services list --project="${project}" --region="${region}" \
    --filter="metadata.name=api" --format="value(metadata.name)") ||
    fail "cannot list the Cloud Run services of ${project} in ${region}"
if [[ -z "${found}" ]]; then
    : >"${out}"
    echo "api-access: no api in ${project} (${region}) yet: a first deploy, no flow runs on any version"
    exit 0
fi
number=$(gcloud projects describe "${project}" --format="value(projectNumber)")
[[ "${number}" =~ ^[0-9]+$ ]] || fail "cannot read the project number of ${project}"
# The api's deterministic URL: its RELAYFLOW_API_URL, the audience it checks tokens against.
url="https://api-${number}.${region}.run.app"
token=$(gcloud auth print-identity-token --audiences="${url}") ||
    fail "cannot mint an ID token for ${url} as this build's account"
[[ -n "${token}" ]] || fail "an empty ID token for ${url}"
printf 'RELAYFLOW_API_URL=%s\nRELAYFLOW_API_TOKEN=%s\n' "${url}" "${token}" >"${out}"
echo "api-access: the api at ${url}"
