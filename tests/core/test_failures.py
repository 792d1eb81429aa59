"""A failure told to a person: status and reason, the remote exception, the log tail, once."""

from __future__ import annotations

import sys
import types

import pytest

import kinetic_core as kc
from tests.core import jobfns


def test_a_failed_job_is_described_with_reason_exception_and_log_lines(storage_uri: str) -> None:
    job = kc.submit(jobfns.fail, ("learning rate too high",))
    job.wait(timeout=60)
    with pytest.raises(ValueError) as raised:
        job.result(cleanup=False)
    text = kc.describe_failure(job, raised.value)
    head, error = text.splitlines()[:2]
    assert head.startswith(f"Kinetic job {job.job_id} (attempt 1) FAILED (reason: Error")
    assert error == "ValueError: learning rate too high"
    assert text.count("raise ValueError(message)") == 1  # logged and returned: shown once
    assert kc.failure_of(job).args == raised.value.args


def test_a_job_without_a_result_shows_its_log_tail(storage_uri: str) -> None:
    job = kc.submit(jobfns.exit_code, (3,))
    job.wait(timeout=60)
    with pytest.raises(kc.JobFailed) as raised:
        job.result(cleanup=False)
    text = kc.describe_failure(job, raised.value, log_tail="last words\n")
    assert "exit code 3" in text.splitlines()[0]
    assert text.endswith(f"--- last 50 log lines of {job.job_id} ---\nlast words")


def test_a_batch_failure_lists_each_failed_child_and_the_partial_results(
    storage_uri: str,
) -> None:
    batch = kc.submit_map(jobfns.add, [(1, 1), ("a", 1)], input_mode="args")
    with pytest.raises(kc.BatchError) as raised:
        batch.results()
    text = kc.describe_batch_failure(raised.value)
    assert "TypeError" in text
    assert text.rstrip().endswith("partial results (None where failed): [2, None]")


def test_a_job_whose_module_does_not_import_there_fails_with_a_kinetic_error(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's setup failure (the call's module is missing in the job) is a
    KineticError: ``except kc.KineticError`` catches it, as the docs say of every failure."""
    module = types.ModuleType("kinetic_test_module_only_here")

    def only_here() -> int:
        return 1

    only_here.__module__ = module.__name__
    only_here.__qualname__ = "only_here"
    module.only_here = only_here  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)  # pickled by reference
    job = kc.submit(only_here)
    job.wait(timeout=60)
    with pytest.raises(kc.KineticError, match="not importable in the job's environment"):
        job.result(cleanup=False)
