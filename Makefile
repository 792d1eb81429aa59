# Two commands on a fresh machine: `make demo` and `make test`. Every install step lives here.
SHELL := /bin/bash
export PATH := $(HOME)/.local/bin:$(PATH)
UV ?= uv
EXTRAS := --extra dev --extra cli --extra gcs --extra kubernetes --extra ui
## --inexact: a sync never removes what a test target added (Playwright), so one lane's sync
## cannot pull a package from under another lane's running tests
SYNC := $(UV) sync --frozen --inexact --python 3.11 --quiet
PYTEST_FLAGS ?= -q -p no:cacheprovider

.PHONY: demo test uv env env-airflow env-prefect lint docs k8s-binaries \
        test-core test-docs test-ui test-kubernetes test-airflow test-airflow-newest test-prefect test-packaging bench clean \
        chromium screenshots slurm test-slurm

## uv: bootstrap uv from PyPI when it is missing
uv:
	@command -v $(UV) >/dev/null 2>&1 || python3 -m pip install --quiet --user uv \
	  || python3 -m pip install --quiet --break-system-packages --user uv

## one environment per orchestrator: Airflow and Prefect pin conflicting fastapi versions
env: uv
	UV_PROJECT_ENVIRONMENT=.venv $(SYNC) $(EXTRAS)

env-airflow: uv
	UV_PROJECT_ENVIRONMENT=.venv-airflow $(SYNC) $(EXTRAS) --extra airflow --extra openlineage

## each older supported Airflow minor in .venv-airflow-MINOR, beside the locked newest
## (.venv-airflow): apache-airflow==MINOR.* with tests/airflow/constraints-MINOR.txt, which pins
## what that minor's official constraints file pins for the packages that break it unpinned
AIRFLOW_MINORS := 3.0 3.1 3.2
env-airflow-%: uv
	$(UV) venv --python 3.11 --quiet --allow-existing .venv-airflow-$*
	$(UV) pip install --quiet --python .venv-airflow-$*/bin/python \
	  -e '.[airflow,dev,cli,gcs,kubernetes,ui]' 'apache-airflow==$*.*' \
	  apache-airflow-providers-openlineage \
	  --constraint tests/airflow/constraints-$*.txt

env-prefect: uv
	UV_PROJECT_ENVIRONMENT=.venv-prefect $(SYNC) $(EXTRAS) --extra prefect

## the oldest and newest supported Prefect minors, each in .venv-prefect-MINOR (uv's cache makes a rerun quick)
PREFECT_OLDEST := 3.8
PREFECT_NEWEST := 3.9
env-prefect-%: uv
	$(UV) venv --quiet --allow-existing --python 3.11 .venv-prefect-$*
	$(UV) pip install --quiet --python .venv-prefect-$*/bin/python \
	  --override tests/prefect/uv-overrides.txt \
	  -e '.[prefect,dev,cli,gcs,kubernetes]' 'prefect==$*.*'

## headless Chromium for the browser tests: Debian's package, installed when missing (never a
## browser that Playwright downloads); Playwright from PyPI goes into the venv that drives it
## (after that venv's sync, which would remove it), pointed at this chromium
PLAYWRIGHT := playwright==1.65.2
playwright = $(UV) pip install --quiet --python $(1)/bin/python '$(PLAYWRIGHT)'
## every apt run holds one lock: the test lanes run in parallel and apt refuses a second dpkg
APT := flock /tmp/kinetic-apt.lock env DEBIAN_FRONTEND=noninteractive
chromium:
	@command -v chromium >/dev/null 2>&1 || { $(APT) apt-get update -qq && \
	  $(APT) apt-get install -y -qq chromium >/dev/null; }

## Slurm and munge for the Slurm tests: Debian's packages, installed when missing (the tests
## start a private cluster of their own; nothing is configured or started system-wide)
slurm:
	@command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || { \
	  $(APT) apt-get update -qq && $(APT) apt-get install -y -qq slurm-wlm munge >/dev/null; }

## the real Kubernetes control plane for tests (built once per machine, then cached)
k8s-binaries:
	flock /tmp/kinetic-apt.lock bash tests/kubernetes/cluster/build.sh

lint: env
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

docs: env
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site

test-core: env
	.venv/bin/pytest tests/core tests/fault $(PYTEST_FLAGS)

## every Python example of README.md and docs/ (Sybil): the pages about Airflow and Prefect
## run in test-airflow and test-prefect, where their orchestrator is installed
test-docs: env
	.venv/bin/pytest tests/docs $(PYTEST_FLAGS)

## the dashboard in headless Chromium (`kinetic ui` as a real server over real jobs)
test-ui: env chromium
	$(call playwright,.venv)
	.venv/bin/pytest tests/ui $(PYTEST_FLAGS)

## docs/assets/dashboard-*.png, written by the browser test (commit them when they change)
screenshots: env chromium
	$(call playwright,.venv)
	KINETIC_SCREENSHOTS=docs/assets .venv/bin/pytest tests/ui $(PYTEST_FLAGS)

## the backend contract runs in its own session: it starts its own cluster (as the examples do)
test-kubernetes: env k8s-binaries
	.venv/bin/pytest tests/kubernetes $(PYTEST_FLAGS)
	.venv/bin/pytest tests/contract -k "not slurm" $(PYTEST_FLAGS)

## the Slurm backend on a private Slurm cluster (its own munge, ports and folders)
test-slurm: env slurm
	.venv/bin/pytest tests/slurm $(PYTEST_FLAGS)
	.venv/bin/pytest tests/contract -k slurm $(PYTEST_FLAGS)

## the whole Airflow suite on every supported minor: the newest (locked, .venv-airflow) and
## each of AIRFLOW_MINORS in its own .venv-airflow-MINOR: the whole suite on the newest (locked)
## and the oldest; the middle minors run the provider's surface (connection form, plugin,
## links, triggers and resume, secrecy) and skip the end-to-end files that exercise kinetic
## through the same code on every minor (DAG runs, multi-worker logs, the Kubernetes and
## Slurm examples, detached batches), which keeps CI well under its limit.
## The browser test (the dashboard inside a real `airflow api-server`) runs on the newest only
AIRFLOW_MIDDLE := 3.1 3.2
AIRFLOW_MIDDLE_SKIP := --ignore=tests/airflow/test_examples_k8s.py --ignore=tests/airflow/test_examples_slurm.py \
  --ignore=tests/airflow/test_batch_detached.py \
  --ignore=tests/airflow/test_dag_runs.py --ignore=tests/airflow/test_log_workers.py
## test-airflow runs every minor; test-airflow-newest and test-airflow-MINOR one each
test-airflow: test-airflow-newest $(addprefix test-airflow-,$(AIRFLOW_MINORS))
test-airflow-newest: env-airflow k8s-binaries slurm chromium
	.venv-airflow/bin/mypy providers/kinetic_airflow
	@echo "== Airflow $$(.venv-airflow/bin/python -c 'import airflow; print(airflow.__version__)')"
	.venv-airflow/bin/pytest tests/airflow --ignore=tests/airflow/browser $(PYTEST_FLAGS)
	$(call playwright,.venv-airflow)
	.venv-airflow/bin/pytest tests/airflow/browser $(PYTEST_FLAGS)
	.venv-airflow/bin/pytest tests/docs -k airflow $(PYTEST_FLAGS)
$(addprefix test-airflow-,$(AIRFLOW_MINORS)): test-airflow-%: env-airflow-% k8s-binaries slurm
	@echo "== Airflow $$(.venv-airflow-$*/bin/python -c 'import airflow; print(airflow.__version__)')"
	.venv-airflow-$*/bin/pytest tests/airflow --ignore=tests/airflow/browser $(PYTEST_FLAGS) \
	  $(if $(filter $*,$(AIRFLOW_MIDDLE)),$(AIRFLOW_MIDDLE_SKIP))

## test-prefect runs both minors; test-prefect-MINOR one (the newest also its docs' examples)
PREFECT_MINORS := $(PREFECT_OLDEST) $(PREFECT_NEWEST)
test-prefect: $(addprefix test-prefect-,$(PREFECT_MINORS))
$(addprefix test-prefect-,$(PREFECT_MINORS)): test-prefect-%: env-prefect-% k8s-binaries slurm
	@echo "== Prefect $$(.venv-prefect-$*/bin/python -c 'import prefect; print(prefect.__version__)')"
	.venv-prefect-$*/bin/mypy providers/kinetic_prefect
	.venv-prefect-$*/bin/pytest tests/prefect $(PYTEST_FLAGS)
	$(if $(filter $*,$(PREFECT_NEWEST)),.venv-prefect-$*/bin/pytest tests/docs -k prefect $(PYTEST_FLAGS))

## the release artifacts: sdist contents, and the wheel installed with [airflow] in a fresh venv
## running a smoke DAG from a temp dir (uv's cache keeps the install quick)
test-packaging: env
	.venv/bin/pytest tests/packaging $(PYTEST_FLAGS)

## The whole suite in parallel lanes; each lane runs its targets one after the other. Lanes
## share no port (every test server and cluster takes free ports), no folder and no venv, and
## most of their time is spent waiting on real processes, so on 2 cores they finish in about
## half the time of one lane. Each target's output goes to test-logs/TARGET.log and is
## printed in one piece when the target ends, with its time; `make test TEST_JOBS=1` runs
## the lanes one after the other.
TEST_JOBS ?= 4
## the lanes, balanced by their measured times (the newest and the oldest Airflow minors run
## the whole provider suite: the longest single targets)
LANES := engine clusters airflow orchestrators
LANE_engine := lint docs test-core test-docs test-ui test-packaging
LANE_clusters := test-kubernetes test-slurm
LANE_airflow := test-airflow-newest test-airflow-3.1 test-prefect-$(PREFECT_OLDEST)
LANE_orchestrators := test-airflow-3.0 test-airflow-3.2 test-prefect-$(PREFECT_NEWEST)
.PHONY: $(addprefix lane-,$(LANES)) $(addprefix test-airflow-,$(AIRFLOW_MINORS)) \
        $(addprefix test-prefect-,$(PREFECT_MINORS))
test: env env-airflow env-prefect-$(PREFECT_OLDEST) env-prefect-$(PREFECT_NEWEST) \
      $(addprefix env-airflow-,$(AIRFLOW_MINORS)) chromium slurm k8s-binaries
	@rm -rf test-logs && mkdir -p test-logs && start=$$(date +%s) && \
	  $(MAKE) --no-print-directory -j$(TEST_JOBS) $(addprefix lane-,$(LANES)) && \
	  echo "== the whole suite passed in $$(( $$(date +%s) - start ))s"

$(addprefix lane-,$(LANES)): lane-%:
	@mkdir -p test-logs; for target in $(LANE_$*); do start=$$(date +%s); \
	  $(MAKE) --no-print-directory -j1 $$target >test-logs/$$target.log 2>&1; rc=$$?; \
	  echo "== $$target (lane $*): $$( ((rc)) && echo FAILED || echo passed) in $$(( $$(date +%s) - start ))s" \
	  "at $$(date -u +%T) UTC" && cat test-logs/$$target.log && ((rc == 0)) || exit 1; done

## the main job on the embedded default: the nightly pipeline in Airflow 3 and in Prefect 3.
## Everything goes to the demo's own storage root (.kinetic-demo/ here, new on each run: the
## first model of a fresh registry is published); each orchestrator's full log goes to a
## file under it, and the last lines say what ran where and what to type next
DEMO_STORAGE := $(CURDIR)/.kinetic-demo
demo: export KINETIC_STORAGE = file://$(DEMO_STORAGE)
demo: env env-airflow env-prefect
	rm -rf $(DEMO_STORAGE) && mkdir -p $(DEMO_STORAGE)
	@echo "== kinetic_core: train, then evaluate =="
	.venv/bin/python dags_examples/demo_core.py
	@echo "== Airflow 3: nightly_training (airflow dags test) =="
	bash dags_examples/run_airflow_demo.sh $(DEMO_STORAGE)/airflow.log
	@echo "== Prefect 3: nightly_training_prefect =="
	PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_HOME=$$(mktemp -d) \
	  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=180 \
	  .venv-prefect/bin/python dags_examples/nightly_training_prefect.py \
	  >$(DEMO_STORAGE)/prefect.log 2>&1 || { tail -40 $(DEMO_STORAGE)/prefect.log; exit 1; }
	@echo "flow run nightly-training done (full log: $(DEMO_STORAGE)/prefect.log)"
	@.venv/bin/python dags_examples/demo_summary.py

bench: env
	for b in bench/roundtrip.py bench/shared_poller.py bench/payload.py bench/batch.py; do \
	  .venv/bin/python $$b || exit 1; done

clean:
	rm -rf .venv .venv-airflow .venv-airflow-* .venv-prefect .venv-prefect-* site dist
