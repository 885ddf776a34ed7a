# The two commands of the README: `make demo` and `make test`. Everything else supports them.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

WHEELHOUSE := $(VENV)/wheelhouse/.stamp

.PHONY: demo test lint unit down install bench sizing wheelhouse

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## The lock file's wheels, downloaded at install time: the index a test's plain
## `pip install relayflow-*.whl` resolves from (tests/project/test_wheel.py; tests never download).
wheelhouse: $(WHEELHOUSE)

$(WHEELHOUSE): requirements.lock $(STAMP)
	$(PY) -m pip download --quiet --disable-pip-version-check -d $(VENV)/wheelhouse -r requirements.lock
	touch $@

## Start the local stack (emulators + services) and run a demo batch of flows.
demo: $(STAMP)
	$(VENV)/bin/relayflow local up
	. .relayflow/local/env && $(VENV)/bin/relayflow demo
	@echo "The stack keeps running: 'source .relayflow/local/env' to use it, 'make down' to stop it."

## Stop what `make demo` started.
down: $(STAMP)
	$(VENV)/bin/relayflow local down

## Lint, type-check, check the layers (import-linter's contracts in pyproject.toml) and run every
## test (the tests start and stop the emulators they need).
test: $(STAMP) $(WHEELHOUSE) lint
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy relayflow
	$(VENV)/bin/lint-imports
	terraform fmt -check -recursive infra/terraform

## Write each environment's Cloud Run sizes and queue shards (infra/terraform/envs/ENV/sizing.tf)
## from the capacity model: the targets and the measured profile are in infra/terraform/sizing.json.
sizing: $(STAMP)
	$(PY) -m relayflow.capacity.sizing

unit: $(STAMP)
	$(VENV)/bin/pytest tests/unit
