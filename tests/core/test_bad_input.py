"""Every user mistake gets a typed error that says what to do; nothing is written or lost."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.core import jobfns


def _written(storage_uri: str) -> list[str]:
    root = Path(storage_uri[7:])
    return (
        sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        if root.exists()
        else []
    )


def test_closure_holding_a_lock_is_rejected_before_writing(storage_uri: str) -> None:
    lock = threading.Lock()
    with pytest.raises(kc.SerializationError, match="do not capture locks"):
        kc.submit(lambda: lock.acquire())
    assert _written(storage_uri) == []


def test_unpicklable_argument_is_rejected_before_writing(storage_uri: str) -> None:
    sock = socket.socket()
    try:
        with pytest.raises(kc.SerializationError, match="Cannot serialize the call"):
            kc.submit(jobfns.add, (sock,))
    finally:
        sock.close()
    assert _written(storage_uri) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "pbs"}, "Unknown backend 'pbs'; choose one of local, kubernetes, gke, slurm"),
        ({"storage": "s3://bucket"}, "Malformed storage URI"),
        ({"storage": "gs://"}, "names no bucket"),
        ({"life_span": 0}, "life_span must be a positive number"),
        ({"life_span": -5}, "life_span must be a positive number"),
        ({"schedule_timeout": 0}, "schedule_timeout must be a positive number"),
        ({"poll_interval": -1}, "poll_interval must be a positive number"),
    ],
)
def test_invalid_target(storage_uri: str, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(kc.ConfigError, match=match):
        kc.submit(jobfns.add, (1,), target=kwargs)
    assert _written(storage_uri) == []


def test_unknown_target_option_names_valid_ones() -> None:
    with pytest.raises(kc.ConfigError, match=r"Unknown target option.*acelerator.*valid options"):
        kc.Target.from_dict({"acelerator": "tpu"})


def test_bad_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_LIFE_SPAN", "an hour")
    with pytest.raises(kc.ConfigError, match="KINETIC_LIFE_SPAN"):
        kc.Target().resolve()


def test_bad_env_value_says_what_it_should_be(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35 item 5: the message said "as <class 'float'>"."""
    monkeypatch.setenv("KINETIC_LIFE_SPAN", "abc")
    with pytest.raises(kc.ConfigError, match="a number of seconds") as err:
        kc.Target().resolve()
    assert "<class" not in str(err.value)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((), {}, "missing a required argument: 'a'"),
        ((1, 2, 3), {}, "too many positional arguments"),
        ((1,), {"c": 2}, "unexpected keyword argument 'c'"),
    ],
)
def test_a_call_the_signature_refuses_is_refused_at_submit(
    storage_uri: str, args: tuple[object, ...], kwargs: dict[str, object], match: str
) -> None:
    """Issue 35 item 5: a missing argument was found only by a FAILED job."""
    with pytest.raises(kc.SubmissionError, match=match) as err:
        kc.submit(jobfns.add, args, kwargs)
    assert "jobfns.add" in str(err.value)
    assert _written(storage_uri) == []


@pytest.mark.parametrize("timeout", [0, -1, -0.5])
def test_zero_or_negative_wait_timeout_is_immediate_timeout(
    storage_uri: str, timeout: float
) -> None:
    job = kc.submit(jobfns.sleep, (30,))
    with pytest.raises(kc.WaitTimeout, match="keeps running"):
        job.wait(timeout=timeout)
    with pytest.raises(kc.WaitTimeout, match="keeps running"):
        asyncio.run(job.await_(timeout=timeout))
    # It returned without waiting for the job (which runs 30 s): the job is not finished.
    assert not job.state().terminal
    job.cancel()


def test_unwritable_storage_root(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(kc.StorageError, match="not writable"):
        kc.submit(jobfns.add, (1,), target={"storage": f"file://{blocker}/store"})


@pytest.mark.parametrize("bad", ["a/b", "..", "../etc", "UPPER", "x" * 200, "", "-dash", "ab"])
def test_bad_job_ids_never_become_paths(storage_uri: str, bad: str) -> None:
    with pytest.raises(kc.InvalidIdError, match="lowercase"):
        kc.attach(bad)
    assert isinstance(kc.InvalidIdError("x"), kc.ConfigError)


def test_attach_to_missing_job(storage_uri: str) -> None:
    with pytest.raises(kc.JobNotFound, match="KINETIC_STORAGE"):
        kc.attach("does-not-exist")


def test_not_callable(storage_uri: str) -> None:
    with pytest.raises(kc.SubmissionError, match="callable"):
        kc.submit("train")  # type: ignore[arg-type]
    with pytest.raises(kc.SubmissionError, match="kwargs"):
        kc.submit(jobfns.add, (1,), {1: 2})  # type: ignore[dict-item]
    assert _written(storage_uri) == []


def test_missing_captured_env_var(storage_uri: str) -> None:
    with pytest.raises(kc.ConfigError, match="NOT_SET_ANYWHERE"):
        kc.submit(jobfns.add, (1,), target={"env": ["NOT_SET_ANYWHERE"]})
    assert _written(storage_uri) == []


def test_handle_from_a_future_version_loads(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    path = Path(storage_uri[7:], "jobs", job.job_id, "handle.json")
    data = json.loads(path.read_text())
    data.update(version=99, gpu_topology="2x4", new_nested={"a": [1, 2]})
    path.write_text(json.dumps(data))  # simulate a newer writer
    attached = kc.attach(job.job_id)
    assert attached.job_id == job.job_id and attached.version == 99
    assert attached.result(timeout=60) == 3


def test_failed_launch_leaves_nothing(storage_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kinetic_core.backends.local import LocalBackend

    def broken(self: object, spec: object) -> None:
        raise OSError("fork failed")

    monkeypatch.setattr(LocalBackend, "launch", broken)
    with pytest.raises(kc.SubmissionError, match="fork failed"):
        kc.submit(jobfns.add, (1,), idempotency_key="k1")
    assert [p for p in _written(storage_uri) if not p.startswith("tmp/")] == []
    monkeypatch.undo()
    job = kc.submit(jobfns.add, (1, 1), idempotency_key="k1", target={"storage": storage_uri})
    assert job.attempt == 1  # the failed launch did not burn an attempt
    assert job.result(timeout=60) == 2


def test_full_disk_is_a_storage_error_not_a_pickling_error(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staging files land on /dev/full (a real device that answers every write ENOSPC)."""
    import os

    from kinetic_core.storage import local

    real_open = local.LocalStorage._open_staged

    def on_full_disk(self: local.LocalStorage, tmp: Path) -> int:
        fd = real_open(self, tmp)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)
        os.close(full)
        return fd

    monkeypatch.setattr(local.LocalStorage, "_open_staged", on_full_disk)
    for size in (10, 1 << 20):  # fails in the pickler (large) or when the file is closed (small)
        with pytest.raises(kc.StorageError, match="disk is full") as info:
            kc.submit(jobfns.add, (b"x" * size,))
        assert not isinstance(info.value, kc.SerializationError)
        assert "picklable" not in str(info.value) and "No space left" in str(info.value)
    assert [p for p in _written(storage_uri) if not p.startswith("tmp/")] == []


@pytest.mark.parametrize("uri", ["file://relative/dir", "file://./here", "file://store"])
def test_relative_file_uri_is_refused(
    uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(kc.ConfigError, match="absolute path") as info:
        kc.Target(storage=uri).resolve()
    assert "file://~/" in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("uri", ["file:///abs/dir", "file://~/kinetic", "file://~"])
def test_absolute_and_home_file_uris_are_accepted(uri: str) -> None:
    resolved = kc.Target(storage=uri).resolve().storage or ""
    assert resolved.startswith("file:///") and "~" not in resolved


def test_storage_root_that_is_a_file_cannot_be_listed(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(kc.StorageError, match="is a file"):
        kc.list_jobs(target={"storage": f"file://{blocker}"})
    with pytest.raises(kc.StorageError, match="is a file"):
        kc.list_batches(target={"storage": f"file://{blocker}"})
    assert kc.list_jobs(target={"storage": f"file://{tmp_path}/missing"}) == []


def test_outputs_folder_is_private(storage_uri: str) -> None:
    job = kc.submit(jobfns.write_output, ("a.txt", "secret"))
    path = Path(job.result(timeout=60))
    root = Path(storage_uri[7:])
    assert path.parent.parent == root / "outputs"
    for folder in (root / "outputs", path.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_the_local_backend_says_once_what_it_ignores(
    storage_uri: str, recwarn: pytest.WarningsRecorder
) -> None:
    """Issue 35 item 5: accelerator, spot and project were ignored without a word."""
    from kinetic_core.jobs import submission

    submission._said.clear()
    target = {"accelerator": "tpu-v5e-8", "spot": True, "project": "p"}
    jobs = [kc.submit(jobfns.add, (1, 2), target=target) for _ in range(2)]
    said = [str(w.message) for w in recwarn if "ignores" in str(w.message)]
    assert said == [
        "the local backend ignores accelerator, project, spot: these options apply to another "
        "backend (choose it with backend= or KINETIC_BACKEND), or drop them."
    ]
    assert [j.result(timeout=60) for j in jobs] == [3, 3]
    recwarn.clear()
    kc.submit(jobfns.add, (1, 2)).result(timeout=60)
    assert not [w for w in recwarn if "ignores" in str(w.message)]
