# syntax=docker/dockerfile:1
# One image for every relayflow component. COMPONENT (set per Cloud Run service by Terraform)
# picks what runs; RELAYFLOW_APP picks which flows it loads.
#
# The same file builds this repository and a team's repository (docs/deploy.md, "Your own
# flows"): a team copies it, .dockerignore and deploy/entrypoint.sh next to its own
# requirements.lock and package, and sets
#   INSTALL  what to install without dependencies besides the lock: relayflow as a wheel or a
#            path, and the team's package, e.g. "wheels/relayflow-0.1.0-py3-none-any.whl ."
#   APP      the default RELAYFLOW_APP, e.g. "myflows.flows:registry" (Terraform sets it too)

# Pinned by digest (a tag can be moved to another image, a digest cannot). To move to a newer
# base, read the digest of the tag and replace it here:
#   docker buildx imagetools inspect python:3.11-slim-bookworm --format '{{json .Manifest.Digest}}'
# checkov:skip=CKV_DOCKER_7:checkov cannot resolve ${PYTHON_IMAGE}; its default is a digest (tests/infra/test_deploy.py).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/relayflow
ENV PATH=/opt/relayflow/bin:${PATH}
WORKDIR /src

# Every third-party distribution, and the build backend, is pinned and checked against its hash;
# first so that a code change does not reinstall them.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

# First-party code from the build context, with no index and no dependencies: all it needs is in
# the lock, and pip check fails the build if something is missing.
COPY . .
ARG INSTALL=.
RUN pip install --no-deps --no-index --no-build-isolation ${INSTALL} \
    && pip check

FROM ${PYTHON_IMAGE}
# checkov:skip=CKV_DOCKER_2:Cloud Run ignores HEALTHCHECK; it probes the container port itself.

ARG APP=relayflow.apps.registration:build_registry
ARG COMPONENT=api
ENV PATH=/opt/relayflow/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RELAYFLOW_APP=${APP} \
    COMPONENT=${COMPONENT} \
    PORT=8080 \
    HOME=/home/relayflow

COPY --from=build /opt/relayflow /opt/relayflow
COPY deploy/entrypoint.sh /usr/local/bin/relayflow-entrypoint
# A home directory: gunicorn keeps its control socket under ~/.gunicorn.
RUN useradd --system --uid 10001 --create-home --home-dir /home/relayflow relayflow
# Not the source tree: imports resolve to the installed packages only.
WORKDIR /home/relayflow

USER 10001
EXPOSE 8080
ENTRYPOINT ["relayflow-entrypoint"]
