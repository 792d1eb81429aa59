#!/usr/bin/env bash
# Run the nightly_training DAG end to end with `airflow dags test` on the embedded default:
# a throwaway AIRFLOW_HOME with SQLite, jobs as detached local processes. Airflow's own log
# goes to the file given as $1 (default: in AIRFLOW_HOME); what the report task printed is
# shown, and the log's tail if the run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export AIRFLOW_HOME="${AIRFLOW_HOME:-$(mktemp -d /tmp/kinetic-airflow-demo.XXXXXX)}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags_examples"
export KINETIC_STORAGE="${KINETIC_STORAGE:-file://$HOME/.kinetic}"
log="${1:-$AIRFLOW_HOME/dags-test.log}"
.venv-airflow/bin/airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/migrate.log"; exit 1; }
if ! .venv-airflow/bin/airflow dags test nightly_training >"$log" 2>&1; then
  tail -40 "$log"
  exit 1
fi
# The report task's lines (job ids, states, metrics, registry) without Airflow's prefixes.
grep -oE "(prepare|train|evaluate) +job=.*|metrics: .*|registry: .*|(published|kept) .*" "$log" \
  | grep -v "^registry: None" | sort -u || true
state=$(grep -oE "DagRun Finished: .*state=[a-z]+" "$log" | grep -oE "state=[a-z]+" | tail -1 || true)
echo "DAG run nightly_training ${state:-finished} (full log: $log)"
