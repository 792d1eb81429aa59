# Two commands on a fresh machine: `make demo` and `make test`. Everything they need is installed here.
SHELL := /bin/bash
UV_BIN := $(shell command -v uv 2>/dev/null)
ifeq ($(UV_BIN),)
UV := $(HOME)/.local/bin/uv
else
UV := $(UV_BIN)
endif
CORE_EXTRAS := --extra dev --extra cli --extra gcs --extra kubernetes
SYNC := $(UV) sync --frozen --python 3.11

.PHONY: demo test uv env env-airflow env-prefect lint docs test-core test-airflow test-prefect bench clean

uv:
	@command -v uv >/dev/null 2>&1 || [ -x $(HOME)/.local/bin/uv ] || python3 -m pip install --user --quiet uv || pip install --quiet uv

env: uv
	UV_PROJECT_ENVIRONMENT=.venv $(SYNC) $(CORE_EXTRAS)

env-airflow: uv
	UV_PROJECT_ENVIRONMENT=.venv-airflow $(SYNC) $(CORE_EXTRAS) --extra airflow

env-prefect: uv
	UV_PROJECT_ENVIRONMENT=.venv-prefect $(SYNC) $(CORE_EXTRAS) --extra prefect

lint: env
	.venv/bin/ruff check .
	.venv/bin/ruff format --check kinetic_core providers tests bench dags_examples
	.venv/bin/mypy

docs: env
	.venv/bin/mkdocs build --strict --site-dir site

test-core: env
	.venv/bin/pytest tests/core tests/fault tests/kubernetes -q

test-airflow: env-airflow
	.venv-airflow/bin/pytest tests/airflow -q

test-prefect: env-prefect
	.venv-prefect/bin/pytest tests/prefect -q

test: lint docs test-core test-airflow test-prefect

demo: env
	.venv/bin/python dags_examples/demo_core.py

bench: env
	for b in bench/*.py; do .venv/bin/python $$b; done

clean:
	rm -rf .venv .venv-airflow .venv-prefect site
