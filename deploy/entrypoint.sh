#!/bin/sh
# Starts one relayflow component on $PORT (Cloud Run sets it). Binding 0.0.0.0 is right inside a
# container: Cloud Run's ingress setting, not the bind address, decides who can reach it.
#
# Works wherever relayflow is installed (this repository's image, or a team's with relayflow as
# a dependency): the start function's source is found through Python's import system, not a path.
set -eu

: "${PORT:=8080}"
: "${COMPONENT:?COMPONENT must be start-flow, worker, poller or api}"
# A worker stuck past Cloud Run's request timeout (3600 s at most) is killed and replaced rather
# than left holding the instance; request deadlines themselves are Cloud Run's.
: "${GUNICORN_TIMEOUT_S:=3630}"
# Threads = the concurrency Cloud Run sends an instance (Terraform sets both from one variable):
# more requests than threads would wait in gunicorn's backlog, eating their dispatch deadline.
: "${GUNICORN_THREADS:=8}"

# One worker process with threads: Cloud Run scales instances, and the handlers wait on I/O.
gunicorn_app() {
    exec gunicorn --bind "0.0.0.0:${PORT}" --workers 1 --threads "${GUNICORN_THREADS}" \
        --timeout "${GUNICORN_TIMEOUT_S}" --graceful-timeout 10 --access-logfile - "$1"
}

module_file() {
    python -c 'import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).origin)' "$1"
}

case "${COMPONENT}" in
    start-flow)
        exec functions-framework --source "$(module_file relayflow.functions.start_flow.main)" \
            --target start_flow --signature-type cloudevent --host 0.0.0.0 --port "${PORT}"
        ;;
    worker | poller | api)
        gunicorn_app "relayflow.services.${COMPONENT}.main:app"
        ;;
    *)
        echo "unknown COMPONENT '${COMPONENT}': expected start-flow, worker, poller or api" >&2
        exit 64
        ;;
esac
