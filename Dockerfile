# One image for every relayflow component; COMPONENT picks what runs (set per Cloud Run service
# by Terraform, or at build time with --build-arg COMPONENT=...).
FROM python:3.11-slim
# checkov:skip=CKV_DOCKER_2:Cloud Run ignores HEALTHCHECK; it probes the container port itself.

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first so that a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY relayflow ./relayflow
COPY functions ./functions
COPY services ./services
COPY deploy/entrypoint.sh /usr/local/bin/relayflow-entrypoint
# A home directory: gunicorn keeps its control socket under ~/.gunicorn.
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --create-home --home-dir /home/relayflow relayflow

ARG COMPONENT=api
ENV COMPONENT=${COMPONENT} \
    PORT=8080 \
    HOME=/home/relayflow

USER 10001
EXPOSE 8080
ENTRYPOINT ["relayflow-entrypoint"]
