#!/usr/bin/env bash
# The dev deploy's gate (cloudbuild.yaml): wait for the test build of this commit
# (deploy/cloudbuild/test.yaml, tagged commit-<sha>, run by the relayflow-test trigger as the
# test account) to end, and stop unless it succeeded. A test build that was retried after a
# failure counts once it succeeds.
#
#   await-tests.sh PROJECT_ID REGION COMMIT_SHA
#
# It asks every AWAIT_POLL_S seconds (20), at most AWAIT_POLLS times (135: 45 minutes).
set -euo pipefail
project="${1:?project}" region="${2:?region}" commit="${3:-}"
poll_s="${AWAIT_POLL_S:-20}"
polls="${AWAIT_POLLS:-135}"

[[ "$commit" =~ ^[0-9a-f]{7,40}$ ]] || {
    echo "await-tests: COMMIT_SHA '${commit}' is not a commit: submit with --substitutions=COMMIT_SHA=\$(git rev-parse HEAD)" >&2
    exit 1
}
for ((poll = 1; ; poll++)); do
    statuses=$(gcloud builds list --project="$project" --region="$region" --limit=20 \
        --filter="tags=\"relayflow-test\" AND tags=\"commit-${commit}\"" --format="value(status)")
    if grep -qx SUCCESS <<<"$statuses"; then
        echo "await-tests: the tests of ${commit} passed"
        exit 0
    fi
    if [[ -n "$statuses" ]] && ! grep -qxE "QUEUED|PENDING|WORKING" <<<"$statuses"; then
        echo "await-tests: the test build of ${commit} ended $(head -n1 <<<"$statuses"); nothing is pushed" >&2
        exit 1
    fi
    if ((poll >= polls)); then
        echo "await-tests: no test build of ${commit} succeeded after ${polls} polls, ${poll_s}s apart; nothing is pushed" >&2
        exit 1
    fi
    sleep "$poll_s"
done
