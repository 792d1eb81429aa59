"""KineticConfig block registration/loading and every bad input."""

from __future__ import annotations

import threading
from importlib.metadata import entry_points
from pathlib import Path

import fns
import pytest
from kinetic_prefect import KineticConfig, kinetic_map, kinetic_task
from prefect import flow
from prefect.testing.cli import invoke_and_assert

import kinetic_core as kc
from kinetic_core.records.envelope import read_summary
from kinetic_core.storage import open_storage


def test_block_registered_through_entry_point_and_loaded_by_name(tmp_path: Path) -> None:
    assert "kinetic_prefect" in {ep.name for ep in entry_points(group="prefect.collections")}
    invoke_and_assert(
        ["block", "register", "-m", "kinetic_prefect"],
        expected_code=0,
        expected_output_contains="Kinetic Config",
    )
    storage = f"file://{tmp_path}/from-block"
    KineticConfig(
        storage=storage, poll_interval=0.5, tags={"team": "ml"}, signing_key="s3cret"
    ).save("test-config", overwrite=True)
    loaded = KineticConfig.load("test-config")
    assert loaded.signing_key is not None and loaded.signing_key.get_secret_value() == "s3cret"
    assert loaded.to_target().storage == storage

    configured = kinetic_task(fns.add, config="test-config", log_interval=0.3)

    @flow
    def using_block() -> int:
        return configured(2, 3)

    assert using_block() == 5
    (job,) = kc.list_jobs(target={"storage": storage, "signing_key": "s3cret"})
    call = read_summary(open_storage(storage), f"jobs/{job.job_id}/payload.pkl")
    assert call["hmac"] and job.tags["team"] == "ml"  # signed with the block's key
    assert kc.list_jobs() == []  # nothing went to the default storage


def test_unknown_block_name_fails_before_submitting_and_is_not_retried() -> None:
    missing = kinetic_task(fns.add, config="no-such-block", retries=3, retry_delay_seconds=0)

    @flow
    def using_missing() -> int:
        return missing(1, 2)

    state = using_missing(return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, kc.ConfigError) and "no-such-block" in str(exc)
    assert kc.list_jobs() == []


def test_bad_inputs_raise_clear_errors_before_anything_is_submitted() -> None:
    with pytest.raises(kc.SubmissionError, match="needs a function"):
        kinetic_task(42)
    lock = threading.Lock()

    def holds_lock() -> bool:
        return lock.locked()

    with pytest.raises(kc.SerializationError, match="Cannot serialize"):
        kinetic_task(holds_lock)
    with pytest.raises(kc.ConfigError, match="Unknown backend"):
        kinetic_task(backend="mainframe")(fns.add)
    with pytest.raises(kc.ConfigError, match="Unknown target option"):
        kinetic_task(target={"nodes": 3})(fns.add)
    with pytest.raises(kc.ConfigError, match="life_span"):
        kinetic_task(life_span=-1)(fns.add)
    with pytest.raises(kc.ConfigError, match="config must be"):
        kinetic_task(config=3.5)(fns.add)
    with pytest.raises(kc.ConfigError, match="log_interval"):
        kinetic_task(log_interval=0)(fns.add)
    with pytest.raises(kc.ConfigError, match="progress_interval"):
        kinetic_map(fns.add, inputs=[1], progress_interval=0)
    with pytest.raises(kc.SubmissionError):
        kinetic_map(42, inputs=[1])
    with pytest.raises(kc.ConfigError, match="non-empty"):
        kinetic_map(fns.add, inputs=[])
    assert kc.list_jobs() == []


def test_invalid_storage_in_env_fails_the_run_without_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KINETIC_STORAGE", "s3://nope")
    task = kinetic_task(fns.add, retries=2, retry_delay_seconds=0)

    @flow
    def bad_env() -> int:
        return task(1, 1)

    state = bad_env(return_state=True)
    assert isinstance(state.result(raise_on_failure=False), kc.ConfigError)
