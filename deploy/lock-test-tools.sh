#!/usr/bin/env bash
# Regenerate the hashed locks of what the test build installs (deploy/cloudbuild/test.yaml):
#   requirements-dev.lock           relayflow's runtime dependencies at the versions of
#                                   requirements.lock (what the image runs), its dev extras and
#                                   the build backend, each file hashed
#   deploy/requirements-checkov.lock checkov at the version cloudbuild pins (_CHECKOV_VERSION)
# from PyPI, with pip-tools (pip install pip-tools). Existing pins are kept unless you pass
# --upgrade (or --upgrade-package NAME), as pip-compile does.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -E '^[A-Za-z0-9_.-]+==' requirements.lock | sed 's/ \\$//' > "$work/runtime-pins.txt"
checkov=$(sed -n 's/^  _CHECKOV_VERSION: "\(.*\)"$/\1/p' deploy/cloudbuild/test.yaml)
[[ -n "$checkov" ]] || { echo "lock-test-tools: no _CHECKOV_VERSION in test.yaml" >&2; exit 1; }
echo "checkov==${checkov}" > "$work/checkov.in"

compile() {
    # PyPI only: the hashes must be those of the files the build downloads.
    env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null pip-compile --quiet --generate-hashes \
        --allow-unsafe --strip-extras --index-url https://pypi.org/simple --no-emit-index-url \
        --annotation-style=line "$@"
}
compile --extra dev --unsafe-package=relayflow --constraint "$work/runtime-pins.txt" \
    --output-file requirements-dev.lock "${@}" deploy/requirements-build.in pyproject.toml
compile --output-file deploy/requirements-checkov.lock "${@}" "$work/checkov.in"
# The temporary inputs are nobody's business in the committed files.
sed -i -e "s# -c $work/runtime-pins.txt,##; s#-c $work/runtime-pins.txt, ##; s#$work/checkov.in#checkov==${checkov}#" \
    -e "s#--constraint=$work/runtime-pins.txt #--constraint=<requirements.lock's pins> #" \
    -e "s#--output-file=[^ ]* #&#" requirements-dev.lock deploy/requirements-checkov.lock
