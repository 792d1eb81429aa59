"""A flow run in its own process, as a worker runs one: ``python flow_process.py ID_FILE [FLOW_RUN_ID]``.

Without FLOW_RUN_ID it creates a flow run and writes its id to ID_FILE; with one it
re-runs that flow run (a retry of the same flow run, as the UI's Retry does). The
flow's value is written to ID_FILE + ".result".
"""

from __future__ import annotations

import sys
from pathlib import Path
from uuid import UUID

import fns
from kinetic_prefect import kinetic_task
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.flow_engine import run_flow
from prefect.states import AwaitingRetry

wait_for_release = kinetic_task(fns.wait_for_release, log_interval=0.3)


@flow
def hold_the_job(workdir: str) -> int:
    return wait_for_release(workdir, 21)


def main(id_file: Path, flow_run_id: str | None) -> None:
    with get_client(sync_client=True) as client:
        if flow_run_id is None:
            flow_run = client.create_flow_run(
                hold_the_job, parameters={"workdir": str(id_file.parent)}
            )
            id_file.write_text(str(flow_run.id))
        else:
            client.set_flow_run_state(UUID(flow_run_id), AwaitingRetry(), force=True)
            flow_run = client.read_flow_run(UUID(flow_run_id))
    value = run_flow(hold_the_job, flow_run=flow_run, parameters=flow_run.parameters)
    Path(f"{id_file}.result").write_text(str(value))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
