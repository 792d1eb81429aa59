"""kinetic_map: one batch, results in order, progress and failure artifacts."""

from __future__ import annotations

import asyncio

import fns
import pytest
from helpers import flow_run_artifacts
from kinetic_prefect import kinetic_map, kinetic_task
from prefect import flow

import kinetic_core as kc

square = kinetic_task(fns.maybe_fail, log_interval=0.3)


def test_kinetic_map_results_in_order_with_progress_artifact() -> None:
    @flow
    async def sweep() -> list[int]:
        return await kinetic_map(
            fns.add, inputs=[(i, 100) for i in range(6)], max_concurrency=3, progress_interval=0.3
        )

    state = asyncio.run(sweep(return_state=True))
    assert state.result() == [100 + i for i in range(6)]
    artifacts = flow_run_artifacts(state.state_details.flow_run_id)
    (progress,) = [a for a in artifacts if a.type == "progress"]
    assert progress.key is not None and progress.key.startswith("kinetic-batch-")
    assert float(progress.data) == 100.0
    assert "6/6" in (progress.description or "") and "succeeded" in (progress.description or "")
    assert not [a for a in artifacts if a.type == "table"]


def test_kinetic_map_return_exceptions_and_failure_table() -> None:
    @flow
    def sweep_sync() -> list[object]:
        return kinetic_map(
            square, inputs=[1, 2, 3, 4], return_exceptions=True, progress_interval=0.3
        )

    state = sweep_sync(return_state=True)
    values = state.result()
    assert values[0] == 1 and values[1] == 4 and values[3] == 16
    assert isinstance(values[2], ValueError) and "bad input 3" in str(values[2])
    (table,) = [a for a in flow_run_artifacts(state.state_details.flow_run_id) if a.type == "table"]
    assert "bad input 3" in table.data and "FAILED" in table.data


def test_kinetic_map_failure_raises_batch_error_and_retry_reattaches() -> None:
    failing = kinetic_task(fns.maybe_fail, retries=1, retry_delay_seconds=0, log_interval=0.3)

    @flow
    def sweep_failing() -> list[int]:
        return kinetic_map(failing, inputs=[1, 3], progress_interval=0.3)

    state = sweep_failing(return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, kc.BatchError)
    assert exc.partial_results[0] == 1 and len(exc.failures) == 1
    assert "bad input 3" in exc.reports[1]  # the remote exception, with its traceback
    assert 'raise ValueError(f"bad input {x}")' in exc.reports[1]
    # The Prefect retry reattached to the same batch: the succeeded child did not run
    # again; only the failed one got another attempt.
    jobs = kc.list_jobs(name="maybe_fail")
    assert len({j.tags["kinetic/group-id"] for j in jobs}) == 1
    by_index = sorted((j.tags["kinetic/index"], j.attempt) for j in jobs)
    assert [a for i, a in by_index if i == "0"] == [1]
    assert [a for i, a in by_index if i == "1"] in ([1], [1, 2])


@pytest.mark.parametrize("bad", [{"max_concurrency": 0}, {"input_mode": "weird"}])
def test_kinetic_map_bad_options(bad: dict[str, object]) -> None:
    @flow
    def sweep_bad() -> list[int]:
        return kinetic_map(fns.add, inputs=[1, 2], **bad)  # type: ignore[arg-type]

    exc = sweep_bad(return_state=True).result(raise_on_failure=False)
    assert isinstance(exc, kc.ConfigError)
    assert kc.list_jobs() == []


def test_kinetic_map_fail_fast_and_child_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    @flow
    def sweep_fast() -> list[object]:
        return kinetic_map(
            fns.say_or_fail,
            inputs=list(range(10)),
            max_concurrency=2,
            fail_fast=True,
            return_exceptions=True,
            progress_interval=0.3,
        )

    values = sweep_fast(return_state=True).result()
    assert isinstance(values[3], kc.RemoteError | ValueError | kc.JobFailed), values[3]
    assert isinstance(values[-1], kc.JobCancelled), values[-1]
    cancelled = [v for v in values if isinstance(v, kc.JobCancelled)]
    assert len(cancelled) >= 5, values
    messages = [r.getMessage() for r in caplog.records]
    assert any(m == "[child 3] child says 3" for m in messages), messages[-30:]
