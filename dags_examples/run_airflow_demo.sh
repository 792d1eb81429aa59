#!/usr/bin/env bash
# Run the nightly_training DAG end to end with `airflow dags test` on the embedded default:
# a throwaway AIRFLOW_HOME with SQLite, jobs as detached local processes.
set -euo pipefail
cd "$(dirname "$0")/.."
export AIRFLOW_HOME="${AIRFLOW_HOME:-$(mktemp -d /tmp/kinetic-airflow-demo.XXXXXX)}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags_examples"
export KINETIC_STORAGE="${KINETIC_STORAGE:-file://$HOME/.kinetic}"
.venv-airflow/bin/airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/migrate.log"; exit 1; }
.venv-airflow/bin/airflow dags test nightly_training
