"""Hooks (xqute's plugin hooks) on the local backend: submitting may refuse, submitted runs
once per new job, and every transition's hook runs once across all the processes that
observe the job (tied to a create-only record), whatever a hook raises."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.config import hooks
from kinetic_core.records import layout
from tests.core import jobfns
from tests.core.hookfns import calls

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no registered hooks and no installed plugins."""
    monkeypatch.setattr(hooks, "_registered", [])
    monkeypatch.setattr(hooks, "_plugins", [])
    yield


class Recorder:
    """Every hook, in memory, in call order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_job_submitting(self, spec: kc.SubmitSpec) -> None:
        self.events.append(("submitting", spec))

    def on_job_submitted(self, job: kc.JobHandle) -> None:
        self.events.append(("submitted", job))

    def on_job_started(self, job: kc.JobHandle) -> None:
        self.events.append(("started", job))

    def on_job_succeeded(self, job: kc.JobHandle) -> None:
        self.events.append(("succeeded", job))

    def on_job_failed(self, job: kc.JobHandle) -> None:
        self.events.append(("failed", job))

    def on_job_cancelled(self, job: kc.JobHandle) -> None:
        self.events.append(("cancelled", job))

    def names(self) -> list[str]:
        return [name for name, _ in self.events]


def _root(storage_uri: str) -> Path:
    return Path(storage_uri[len("file://") :])


def _wait_for(path: Path, count: int = 1, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() if count == 1 else len(list(path.iterdir())) >= count):
        assert time.monotonic() < deadline, f"{path} never got {count}"
        time.sleep(0.05)


def test_a_local_job_fires_submitting_submitted_started_succeeded(storage_uri: str) -> None:
    recorder = kc.register_hooks(Recorder())
    job = kc.submit(
        jobfns.add,
        (2, 3),
        name="adder",
        tags={"team": "ml"},
        target=kc.Target(signing_key="s3cret"),
        owner="ana",
        description="nightly eval",
    )
    assert job.result(timeout=60) == 5
    assert recorder.names() == ["submitting", "submitted", "started", "succeeded"]
    spec = recorder.events[0][1]
    assert (spec.function, spec.name, dict(spec.tags)) == (
        "tests.core.jobfns.add",
        "adder",
        {"team": "ml"},
    )
    assert spec.target["backend"] == "local" and spec.idempotency_key is None
    assert (spec.owner, spec.description) == ("ana", "nightly eval")
    assert "signing_key" not in spec.target
    with pytest.raises(TypeError):
        spec.target["backend"] = "gke"
    for _, handle in recorder.events[1:]:
        assert handle.job_id == job.job_id
        assert handle.signing_key is None  # hooks never see the key
    # Observing the ended job again fires nothing more.
    assert job.state().status is kc.JobStatus.SUCCEEDED
    assert len(recorder.events) == 4


def test_submitted_fires_once_per_new_job_not_for_a_reattach(
    storage_uri: str, tmp_path: Path
) -> None:
    recorder = kc.register_hooks(Recorder())
    gate = tmp_path / "gate"
    first = kc.submit(jobfns.wait_for_file, (str(gate), 1), idempotency_key="nightly")
    again = kc.submit(jobfns.wait_for_file, (str(gate), 1), idempotency_key="nightly")
    assert again.reattached and again.job_id == first.job_id
    assert recorder.names().count("submitting") == 2
    assert recorder.names().count("submitted") == 1
    assert recorder.events[0][1].idempotency_key == "nightly"
    gate.touch()
    assert first.result(timeout=60) == 1


class Refuses:
    def __init__(self, how: str) -> None:
        self.how = how

    def on_job_submitting(self, spec: kc.SubmitSpec) -> bool:
        if "team" in spec.tags:
            return True
        if self.how == "raise":
            raise PermissionError("every job needs a team tag")
        return False

    def __repr__(self) -> str:
        return f"Refuses({self.how})"


@pytest.mark.parametrize("how", ["false", "raise"])
def test_a_refused_submission_raises_and_writes_nothing(storage_uri: str, how: str) -> None:
    kc.register_hooks(Refuses(how))
    recorder = kc.register_hooks(Recorder())
    with pytest.raises(kc.SubmissionRefused) as info:
        kc.submit(jobfns.add, (1, 2), idempotency_key="k", volumes=None)
    assert isinstance(info.value, kc.SubmissionError)
    assert info.value.hook == f"Refuses({how})"
    assert f"Refuses({how})" in str(info.value) and "Nothing was written" in str(info.value)
    if how == "raise":
        assert "every job needs a team tag" in str(info.value)
    assert not _root(storage_uri).exists() or not any(_root(storage_uri).rglob("*"))
    assert recorder.names() == []  # refused before the later hooks were asked
    # The same hook lets a compliant submission through.
    job = kc.submit(jobfns.add, (1, 2), tags={"team": "ml"})
    assert job.result(timeout=60) == 3


def test_failed_and_cancelled_fire(storage_uri: str, tmp_path: Path) -> None:
    recorder = kc.register_hooks(Recorder())
    failing = kc.submit(jobfns.fail, ("boom",))
    with pytest.raises(ValueError, match="boom"):
        failing.result(timeout=60)
    gate, ready = tmp_path / "gate", tmp_path / "ready"
    waiting = kc.submit(jobfns.wait_for_file, (str(gate), 1, str(ready)))
    _wait_for(ready)
    waiting.cancel()
    assert waiting.wait(timeout=60).status is kc.JobStatus.CANCELLED
    ends = [(name, job.job_id) for name, job in recorder.events if name in ("failed", "cancelled")]
    assert ends == [("failed", failing.job_id), ("cancelled", waiting.job_id)]
    assert "succeeded" not in recorder.names()


def test_an_end_seen_first_fires_started_only_if_the_job_ran(storage_uri: str) -> None:
    """A job that ran between two polls fires started (its runner's record says it ran)
    before its end; one cancelled before it ran fires only cancelled, whatever start time
    its backend reported (a queue's admission)."""
    from datetime import UTC, datetime

    from kinetic_core.records import history
    from kinetic_core.records.lifecycle import write_record
    from kinetic_core.storage import open_storage

    recorder = kc.register_hooks(Recorder())
    storage = open_storage(storage_uri)
    admitted = datetime.now(UTC)
    for job_id, status, ran in [
        ("never-ran-1", kc.JobStatus.CANCELLED, False),
        ("ran-quickly-1", kc.JobStatus.FAILED, True),
    ]:
        if ran:
            write_record(storage, job_id, layout.STARTED)
        handle = kc.JobHandle(job_id=job_id, storage=storage_uri, target={"backend": "local"})
        state = kc.JobState(job_id=job_id, status=status, started_at=admitted)
        history.note(storage, state, handle)
        history.note(storage, state, handle)  # seen again: nothing more
    assert [(n, j.job_id) for n, j in recorder.events] == [
        ("cancelled", "never-ran-1"),
        ("started", "ran-quickly-1"),
        ("failed", "ran-quickly-1"),
    ]


def _observer_script(job_id: str, folder: Path, ready: Path) -> str:
    return textwrap.dedent(
        f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        from tests.core.hookfns import FileHooks
        kc.register_hooks(FileHooks({str(folder)!r}))
        job = kc.attach({job_id!r})
        while (state := job.state()).status is not kc.JobStatus.RUNNING and not state.terminal:
            time.sleep(0.01)
        open(os.path.join({str(ready)!r}, str(os.getpid())), "w").close()
        print(job.wait(timeout=120).status.value)
        """
    )


def test_ten_observer_processes_fire_each_transition_once(storage_uri: str, tmp_path: Path) -> None:
    folder, ready, gate = tmp_path / "calls", tmp_path / "ready", tmp_path / "gate"
    folder.mkdir()
    ready.mkdir()
    job = kc.submit(jobfns.wait_for_file, (str(gate), 7, "", 600))
    env = {**os.environ, "KINETIC_STORAGE": storage_uri}
    script = _observer_script(job.job_id, folder, ready)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        for _ in range(10)
    ]
    _wait_for(ready, count=10)  # all ten saw it RUNNING: all raced for "started"
    gate.touch()
    outs = [p.communicate(timeout=180)[0].strip() for p in procs]
    assert outs == ["SUCCEEDED"] * 10
    assert calls(folder) == [("started", job.job_id), ("succeeded", job.job_id)]
    # Each fired by the process whose marker write won; the markers stay out of history.
    root = _root(storage_uri)
    assert sorted(p.name for p in (root / layout.history_dir(job.job_id)).glob("hook-*")) == [
        "hook-started.json",
        "hook-succeeded.json",
    ]
    assert [t.status for t in job.history()] == [kc.JobStatus.RUNNING, kc.JobStatus.SUCCEEDED]


class Raises:
    def on_job_started(self, job: kc.JobHandle) -> None:
        raise RuntimeError("slack is down")

    def on_job_succeeded(self, job: kc.JobHandle) -> None:
        raise RuntimeError("slack is down")


def test_a_raising_hook_is_logged_and_does_not_break_result(
    storage_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    kc.register_hooks(Raises())
    recorder = kc.register_hooks(Recorder())
    with caplog.at_level(logging.ERROR, logger="kinetic_core.config.hooks"):
        job = kc.submit(jobfns.add, (20, 22))
        assert job.result(timeout=60) == 42
    raised = [r for r in caplog.records if r.name == "kinetic_core.config.hooks"]
    assert len(raised) == 2 and all("slack is down" in r.exc_text for r in raised)  # type: ignore[operator]
    assert recorder.names()[-2:] == ["started", "succeeded"]  # later hooks still ran


class AsyncHooks:
    def __init__(self) -> None:
        self.events: list[str] = []

    async def on_job_submitting(self, spec: kc.SubmitSpec) -> bool:
        await asyncio.sleep(0)
        return spec.name != "forbidden"

    async def on_job_succeeded(self, job: kc.JobHandle) -> None:
        await asyncio.sleep(0.01)
        self.events.append(f"succeeded {job.job_id}")


def test_async_hooks_are_awaited_via_aresult(storage_uri: str) -> None:
    async_hooks = kc.register_hooks(AsyncHooks())

    async def main() -> tuple[kc.JobHandle, int]:
        job = await kc.asubmit(jobfns.add, (1, 1))
        return job, await job.aresult(timeout=60)

    job, value = asyncio.run(main())
    assert value == 2
    assert async_hooks.events == [f"succeeded {job.job_id}"]
    with pytest.raises(kc.SubmissionRefused):  # an async refusal, from sync code
        kc.submit(jobfns.add, (1, 1), name="forbidden")
    # And from sync code running inside an event loop (it must not wait on itself).

    async def inside_a_loop() -> None:
        with pytest.raises(kc.SubmissionRefused):
            kc.submit(jobfns.add, (1, 1), name="forbidden")

    asyncio.run(inside_a_loop())


def test_register_refuses_an_object_without_hooks_or_with_a_misspelt_one() -> None:
    class Misspelt:
        def on_job_succeed(self, job: Any) -> None: ...

    with pytest.raises(kc.ConfigError, match="on_job_succeed is not a hook"):
        kc.register_hooks(Misspelt())
    with pytest.raises(kc.ConfigError, match="has no hook"):
        kc.register_hooks(object())
    recorder = Recorder()
    kc.register_hooks(recorder)
    kc.register_hooks(recorder)
    assert hooks.active() == [recorder]
    kc.unregister_hooks(recorder)
    assert hooks.active() == []


PLUGIN = """
import os

class Plugin:
    def on_job_succeeded(self, job):
        open(os.path.join(os.environ["PLUGIN_OUT"], "succeeded-" + job.job_id), "w").close()

def factory():
    class Refuser:
        def on_job_submitting(self, spec):
            return spec.name != "refused-by-plugin"
    return Refuser()
"""


def test_an_installed_plugin_is_discovered_from_its_entry_point(
    storage_uri: str, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    dist = site / "kw_hooks_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "kw_hooks_plugin.py").write_text(PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kw-hooks-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[kinetic_workflows.hooks]\n"
        "files = kw_hooks_plugin:Plugin\n"
        "policy = kw_hooks_plugin:factory\n"
        "broken = kw_no_such_module:Plugin\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(site)!r}, {str(ROOT)!r}]
        import kinetic_core as kc
        from tests.core import jobfns
        job = kc.submit(jobfns.add, (3, 4))
        print(job.job_id, job.result(timeout=60))
        try:
            kc.submit(jobfns.add, (3, 4), name="refused-by-plugin")
        except kc.SubmissionRefused as exc:
            print("refused", exc.hook)
        """
    )
    env = {**os.environ, "KINETIC_STORAGE": storage_uri, "PLUGIN_OUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    job_id, value = done.stdout.splitlines()[0].split()
    assert value == "7"
    assert os.listdir(out) == [f"succeeded-{job_id}"]
    assert done.stdout.splitlines()[1].startswith("refused ")
    # The broken plugin was logged and left out; it broke neither the submit nor the wait.
    assert "hook plugin broken = kw_no_such_module:Plugin is not loaded" in done.stderr


def test_a_recovery_fires_recovered_once_among_observers(storage_uri: str, tmp_path: Path) -> None:
    from tests.core.test_recovery import _kill_job

    work, folder, ready = tmp_path / "work", tmp_path / "calls", tmp_path / "ready"
    for d in (work, folder, ready):
        d.mkdir()
    job = kc.submit(jobfns.resumable, (str(work), 10), target=kc.Target(max_recoveries=1))
    _wait_for(work / "halfway")
    env = {**os.environ, "KINETIC_STORAGE": storage_uri}
    script = _observer_script(job.job_id, folder, ready)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        for _ in range(4)
    ]
    _wait_for(ready, count=4)
    _kill_job(storage_uri, job.job_id)
    outs = [p.communicate(timeout=180)[0].strip() for p in procs]
    assert outs == ["SUCCEEDED"] * 4
    successor = job.state().job_id
    assert successor != job.job_id
    assert calls(folder) == sorted(
        [
            ("started", job.job_id),
            ("failed", job.job_id),  # the attempt that was lost
            ("recovered", job.job_id),
            ("started", successor),
            ("succeeded", successor),
        ]
    )
    (recovered,) = folder.glob("recovered--*")
    assert recovered.read_text() == successor
