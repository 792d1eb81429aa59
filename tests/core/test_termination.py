"""A process stopped with SIGTERM cancels the jobs it waits on, then dies as the signal says."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import kinetic_core as kc
from kinetic_core.ops import termination
from tests.core import jobfns

WAITER = textwrap.dedent(
    """
    import sys
    import kinetic_core as kc
    from tests.core import jobfns

    kc.install_termination_handler()
    job = kc.submit(jobfns.sleep, (120,))
    with kc.cancel_on_termination(job):
        print(job.job_id, flush=True)  # only now may the test's SIGTERM come
        job.wait(timeout=120)
    """
)


def test_sigterm_cancels_the_waited_job_and_still_terminates(
    storage_uri: str, tmp_path: Path
) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.stdout is not None
    job_id = proc.stdout.readline().strip()
    job = kc.attach(job_id)
    deadline = time.monotonic() + 60
    while job.state().status is not kc.JobStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM  # the default action still happened
    assert job.wait(timeout=60).status is kc.JobStatus.CANCELLED


def test_leaving_the_block_forgets_the_job(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    with kc.cancel_on_termination(job):
        assert job.result(timeout=60) == 3
    termination.cancel_waiting("test")  # nothing waited on any more: nothing cancelled
    assert job.state().status is kc.JobStatus.SUCCEEDED
