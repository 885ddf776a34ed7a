#!/bin/sh
# Starts one relayflow component on $PORT (Cloud Run sets it). Binding 0.0.0.0 is right inside a
# container: Cloud Run's ingress setting, not the bind address, decides who can reach it.
set -eu

: "${PORT:=8080}"
: "${COMPONENT:?COMPONENT must be start-flow, worker, poller or api}"

# One worker process with threads: Cloud Run scales instances, and the handlers wait on I/O.
# --timeout 0 leaves request timeouts to Cloud Run.
gunicorn_app() {
    exec gunicorn --bind "0.0.0.0:${PORT}" --workers 1 --threads 8 --timeout 0 \
        --access-logfile - "$1"
}

case "${COMPONENT}" in
    start-flow)
        exec functions-framework --source /app/functions/start_flow/main.py \
            --target start_flow --signature-type cloudevent --host 0.0.0.0 --port "${PORT}"
        ;;
    worker | poller | api)
        gunicorn_app "services.${COMPONENT}.main:app"
        ;;
    *)
        echo "unknown COMPONENT '${COMPONENT}': expected start-flow, worker, poller or api" >&2
        exit 64
        ;;
esac
