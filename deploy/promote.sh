#!/usr/bin/env bash
# Copies one image, by digest, from the environment it was tested in to this environment's
# repository, and checks that the copy has the same digest and that the original was built by
# Cloud Build with provenance. Writes the promoted reference to $WORKSPACE/image.txt.
#
#   promote.sh SOURCE_REPOSITORY DIGEST TARGET_REPOSITORY
#   (repositories are REGION-docker.pkg.dev/PROJECT/REPO; DIGEST is sha256:<64 hex>)
set -euo pipefail

fail() {
    echo "promote: $*" >&2
    exit 1
}

[[ $# -eq 3 ]] || fail "usage: promote.sh SOURCE_REPOSITORY DIGEST TARGET_REPOSITORY"
source_repo=$1 digest=$2 target_repo=$3
workspace=${WORKSPACE:-/workspace}
image=relayflow

[[ "${digest}" =~ ^sha256:[0-9a-f]{64}$ ]] || fail "_IMAGE_DIGEST must be sha256:<64 hex>, got '${digest}'"
[[ -n "${source_repo}" && "${source_repo}" != "${target_repo}" ]] ||
    fail "_SOURCE_REPOSITORY must be the upstream environment's repository"

src="${source_repo}/${image}@${digest}"
dst="${target_repo}/${image}"

# Only what the upstream build produced, with its SLSA provenance, is promoted.
provenance=$(gcloud artifacts docker images describe "${src}" --show-provenance --format=json) ||
    fail "cannot read ${src}"
grep -q '"provenance_summary"' <<<"${provenance}" || fail "${src} has no build provenance"

# Copies the manifest as is, so the digest is the same in both repositories.
gcloud container images add-tag --quiet "${src}" "${dst}:promoted-${digest#sha256:}"
copied=$(gcloud artifacts docker images describe "${dst}@${digest}" --format='value(image_summary.digest)') ||
    fail "the copy ${dst}@${digest} is missing"
[[ "${copied}" == "${digest}" ]] || fail "the copy has digest '${copied}', not ${digest}"

echo "${dst}@${digest}" >"${workspace}/image.txt"
echo "promote: ${src} -> ${dst}@${digest}"
