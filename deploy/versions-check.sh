#!/bin/sh
# Before a deploy: stop it if the app it deploys no longer registers a flow version that flows
# still run on (each would end DEFINITION_CHANGED at its next task). Runs in the image being
# deployed, so the app is loaded exactly as the services will load it, and asks the api through
# `relayflow versions check` (README, "Changing a flow while flows run").
#
#   versions-check.sh ACCESS_FILE ENV_TFVARS [APP] [check|skip]
#
# ACCESS_FILE is deploy/api-access.sh's (empty: no api yet, nothing can run). The app is the
# environment's tfvars `app` if it sets one, else APP (the build's _APP), else the image's
# RELAYFLOW_APP: what Terraform gives the services. `skip` (the _VERSIONS_CHECK substitution)
# is for the one deploy that brings this check to an api from before it, which has no
# GET /versions and does not admit the build account yet (docs/deploy.md).
set -eu

fail() {
    echo "versions-check: $*" >&2
    exit 1
}

[ $# -ge 2 ] && [ $# -le 4 ] || fail "usage: versions-check.sh ACCESS_FILE ENV_TFVARS [APP] [check|skip]"
access=$1
tfvars=$2
app=${3:-}
mode=${4:-check}

case "${mode}" in
    check) ;;
    skip)
        rm -f "${access}" 2>/dev/null || true
        echo "versions-check: skipped (_VERSIONS_CHECK=skip): nothing checked that flows still run on the versions this deploy keeps"
        exit 0
        ;;
    *) fail "the mode is check or skip, not '${mode}'" ;;
esac
[ -f "${access}" ] || fail "no ${access}: deploy/api-access.sh runs first"
if [ ! -s "${access}" ]; then
    echo "versions-check: no api deployed yet, so no flow runs on any version: nothing to check"
    exit 0
fi
configured=""
if [ -f "${tfvars}" ]; then
    configured=$(sed -n 's/^[[:space:]]*app[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "${tfvars}" | tail -n 1)
fi
target=${configured:-${app:-${RELAYFLOW_APP:-}}}
[ -n "${target}" ] || fail "no app to check: set app in the tfvars, _APP, or RELAYFLOW_APP"

# The URL and the token, then the file gone: nothing after this step needs the token.
RELAYFLOW_API_URL=$(sed -n 's/^RELAYFLOW_API_URL=//p' "${access}")
RELAYFLOW_API_TOKEN=$(sed -n 's/^RELAYFLOW_API_TOKEN=//p' "${access}")
export RELAYFLOW_API_URL RELAYFLOW_API_TOKEN
rm -f "${access}" 2>/dev/null || true
echo "versions-check: ${target} against the flows running in this environment"
exec relayflow versions check --app "${target}"
