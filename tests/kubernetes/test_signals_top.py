"""``send_signal`` and ``top`` on the test cluster: no exec into the pod, the request goes
through storage to the pod's runner, which raises it in the function's process; the same
runner's samples reach ``top()``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import kinetic_core as kc
from kinetic_core.control.polling import poll_ticks
from kinetic_core.runtime import signals, telemetry
from tests.core import signalfns

KEY = "signal-test-key-" + "s" * 16


def until(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    for _ in poll_ticks(interval=0.25, timeout=timeout, describe=lambda: what):
        if check():
            return


def test_a_signal_reaches_the_pods_runner_and_top_reads_its_samples(
    kube: kc.Target, tmp_path: Path
) -> None:
    target = replace(
        kube,
        signing_key=KEY,  # requests and samples are signed and checked on both sides
        pickle_by_value=[*(kube.pickle_by_value or []), "tests.core.signalfns"],
        env={signals.POLL_ENV: "0.3", telemetry.SAMPLE_ENV: "0.5"},
    )
    marks = tmp_path / "handled.txt"
    job = kc.submit(signalfns.wait_for_signal, (str(marks), "SIGUSR1"), target=target)
    until(lambda: signalfns.ready(str(marks)) >= 1, "the pod's function to install its handler")
    until(lambda: job.status() is kc.JobStatus.RUNNING, "the job to read RUNNING")
    req = job.send_signal("SIGUSR1", wait=True, timeout=120)
    assert req.delivered and [a.worker for a in req.acks] == [0], req
    until(lambda: bool(job.top().workers), "a telemetry sample from the pod")
    sample = job.top().workers[0]
    assert (sample.rss_bytes or 0) > 0 and sample.gpus is None
    assert job.result(timeout=120) == 1
    assert len(marks.read_text().splitlines()) == 1
