"""The local backend under crashes: each test reproduces one way a kill or a forged record
used to break "one job id, one execution, a true state, a working cancel"."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends.local import zygote
from kinetic_core.util.procs import process_alive, start_ticks
from tests.core import jobfns
from tests.fault import chaosfns
from tests.fault.chaos import zombie_children
from tests.fault.test_faults import _pid_alive, _wait_for

ROOT = Path(__file__).resolve().parents[2]


def _run_script(body: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(body)
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, **kwargs
    )


@pytest.fixture
def private_zygote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A zygote socket of this test's own (subprocesses inherit it through the env)."""
    directory = tmp_path / "zyg"
    directory.mkdir(mode=0o700)
    path = str(directory / "zygote.sock")
    monkeypatch.setenv("KINETIC_ZYGOTE_SOCKET", path)
    monkeypatch.setattr(zygote, "socket_path", lambda: path)
    yield path
    pid_file = Path(f"{path}.pid")
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _sleeping_job(storage_uri: str, tmp_path: Path) -> tuple[kc.JobHandle, Path, Path]:
    """A running job, the file with its runner's pid, and its launch record."""
    pid_file = tmp_path / "pid"
    job = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 60))
    _wait_for(pid_file.exists, "the job to write its pid")
    store = Path(storage_uri[len("file://") :])
    return job, pid_file, store / "backend-local" / job.job_id / "launch.json"


# ---- 1. a failed launch leaves nothing that runs or reads as launched ---------------------


def test_failed_launch_leaves_no_record_and_a_keyed_retry_runs(
    storage_uri: str, private_zygote: str, tmp_path: Path
) -> None:
    # A "zygote" that accepts a launch request and drops the connection without answering.
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(private_zygote)
    server.listen(8)

    def drop() -> None:
        conn, _ = server.accept()
        conn.recv(1 << 20)
        conn.close()

    dropper = threading.Thread(target=drop)
    dropper.start()
    with pytest.raises(kc.SubmissionError):
        kc.submit(jobfns.add, (1, 2), idempotency_key="k1")
    dropper.join()
    server.close()
    os.unlink(private_zygote)
    store = Path(storage_uri[len("file://") :])
    leftovers = [p for p in (store / "backend-local").rglob("*") if p.name != ".submitting"]
    assert leftovers == []  # nothing reads as launched
    job = kc.submit(jobfns.add, (1, 2), idempotency_key="k1")
    assert job.result(timeout=30) == 3


# ---- 2. one client never affects another; one zygote per socket ---------------------------


def test_zygote_survives_a_client_that_vanishes(storage_uri: str, private_zygote: str) -> None:
    assert kc.submit(jobfns.add, (1, 1)).result(timeout=60) == 2  # starts the zygote
    pid = int(Path(f"{private_zygote}.pid").read_text())
    store = Path(storage_uri[len("file://") :])
    for i in range(5):
        job_dir = store / "backend-local" / f"ghost-{i}"
        job_dir.mkdir(parents=True)
        request = {
            "argv": [str(job_dir), "0", "--storage", storage_uri, "--job-id", f"ghost-{i}"],
            "env": dict(os.environ),
            "cwd": "/",
            "log": str(job_dir / "output.log"),
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(private_zygote)
        conn.sendall(json.dumps(request).encode() + b"\n")
        conn.close()  # the submitter vanished before reading its answer
    assert kc.submit(jobfns.add, (2, 2)).result(timeout=60) == 4
    assert process_alive(pid), "the zygote died because a client vanished"
    assert int(Path(f"{private_zygote}.pid").read_text()) == pid


def test_one_zygote_per_socket(private_zygote: str) -> None:
    assert zygote._start(private_zygote)
    first = int(Path(f"{private_zygote}.pid").read_text())
    second = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from {zygote.__name__} import serve; serve({private_zygote!r}, 60)",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert second.wait(timeout=30) is not None  # it gave way: the socket has a live zygote
    assert process_alive(first)
    assert int(Path(f"{private_zygote}.pid").read_text()) == first


# ---- 3. a job forked before the submitter recorded it ---------------------------------------


def test_submitter_killed_right_after_the_fork_leaves_a_true_state(
    storage_uri: str, tmp_path: Path, private_zygote: str
) -> None:
    """Killed between the fork and the launch's confirmation: the job either never runs
    (and reads terminal, with no process left) or runs, reads live and can be cancelled;
    a keyed resubmit never runs beside it."""
    trace = tmp_path / "runs"
    trace.mkdir()
    out = _run_script(
        f"""
        import os, signal
        import kinetic_core as kc
        from kinetic_core.backends.local import zygote
        from tests.fault import chaosfns
        real = zygote.launch
        def launch_then_die(*args, **kwargs):
            launched = real(*args, **kwargs)
            if launched is not None:
                os.kill(os.getpid(), signal.SIGKILL)
            return launched
        zygote.launch = launch_then_die
        kc.submit(chaosfns.trace, ({str(trace)!r}, 60, 1), idempotency_key="forked")
        """
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    (job,) = kc.list_jobs()
    ran = trace / job.job_id
    _wait_for(lambda: ran.exists() or job.state().terminal, "the job to run or settle")
    if ran.exists():
        (runner,) = chaosfns.runs(str(ran))
        assert not job.state().terminal  # its runner lives: neither FAILED nor Lost
        assert job.cancel() is True
        _wait_for(lambda: not _pid_alive(runner), "cancel() to stop the runner", timeout=20)
        assert job.wait(timeout=30).status is kc.JobStatus.CANCELLED
        return
    first = job.state()
    assert first.status is kc.JobStatus.FAILED, first
    store = Path(storage_uri[len("file://") :])
    launch = json.loads((store / "backend-local" / job.job_id / "launch.json").read_text())
    assert not process_alive(launch["pid"], launch["start_ticks"])
    retry = kc.submit(chaosfns.trace, (str(trace), 0, 2), idempotency_key="forked")
    assert retry.attempt == 2 and retry.result(timeout=60) == 2
    assert len(chaosfns.runs(str(trace / retry.job_id))) == 1
    assert not ran.exists()  # attempt 1 never ran
    assert kc.attach(job.job_id).state().status is kc.JobStatus.FAILED  # and never flips


# ---- 4. the runner dies with its supervisor ---------------------------------------------------


@pytest.mark.parametrize("mode", ["1", "0"])
def test_killing_only_the_supervisor_kills_the_runner(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("KINETIC_LOCAL_ZYGOTE", mode)
    pid_file = tmp_path / "pid"
    job = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 60))
    _wait_for(pid_file.exists, "the job to write its pid")
    runner = int(pid_file.read_text())
    store = Path(storage_uri[len("file://") :])
    launch = json.loads((store / "backend-local" / job.job_id / "launch.json").read_text())
    os.kill(launch["pid"], signal.SIGKILL)
    _wait_for(lambda: not _pid_alive(runner), "the runner to die with its supervisor", 20)
    state = job.wait(timeout=30)
    assert state.status is kc.JobStatus.FAILED and state.reason == "Lost"


# ---- 5. a forged launch record never signals an unrelated process -----------------------------


def test_forged_launch_record_cannot_signal_another_process(
    storage_uri: str, tmp_path: Path
) -> None:
    job, _, launch_file = _sleeping_job(storage_uri, tmp_path)
    real = json.loads(launch_file.read_text())
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        forged = {**real, "pid": victim.pid, "start_ticks": start_ticks(victim.pid)}
        launch_file.write_text(json.dumps(forged))
        kc.attach(job.job_id).cancel()  # a fresh process's view: no cached record
        with pytest.raises(subprocess.TimeoutExpired):
            victim.wait(timeout=3)  # still alive: not signalled
    finally:
        victim.kill()
        victim.wait()
        # the job itself reads its recorded cancel and stops (runtime/decided_stop.py)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(real["pid"], signal.SIGKILL)


# ---- 9. logs outlive the backend's records ----------------------------------------------------


@pytest.mark.parametrize("mode", ["1", "0"])
def test_logs_stay_readable_after_the_result_is_collected(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("KINETIC_LOCAL_ZYGOTE", mode)
    job = kc.submit(jobfns.chatty, (3,))
    assert job.result(timeout=60) == 3  # cleans up the backend records
    assert "line 2" in job.logs()
    assert "line 0" in kc.attach(job.job_id).logs(tail=5)
    text, _ = job.read_logs()
    assert "line 1" in text


# ---- 10. no leftovers --------------------------------------------------------------------------


def test_staging_files_of_a_killed_writer_are_swept(storage_uri: str) -> None:
    out = _run_script(
        f"""
        import os, signal
        from kinetic_core.storage import open_storage
        with open_storage({storage_uri!r}).open_write("jobs/x/big.bin") as fh:
            fh.write(b"half")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert out.returncode == -signal.SIGKILL
    store = Path(storage_uri[len("file://") :])
    assert list((store / "tmp").iterdir())  # the kill left one behind
    _run_script(
        f"""
        from kinetic_core.storage import open_storage
        open_storage({storage_uri!r}).write_bytes("jobs/y/small.bin", b"ok")
        """
    ).check_returncode()
    assert list((store / "tmp").iterdir()) == []


def test_no_zombie_supervisors_without_the_zygote(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_LOCAL_ZYGOTE", "0")
    jobs = [kc.submit(jobfns.add, (i, 1)) for i in range(3)]
    assert [j.result(timeout=60) for j in jobs] == [1, 2, 3]
    assert zombie_children() == []


def test_half_submitted_job_with_a_dead_submitter_is_not_pending(
    storage_uri: str, private_zygote: str
) -> None:
    out = _run_script(
        """
        import os, signal
        import kinetic_core as kc
        from kinetic_core.backends.local.backend import LocalBackend
        from tests.core import jobfns
        def die(self, spec):
            os.kill(os.getpid(), signal.SIGKILL)
        LocalBackend.launch = die
        kc.submit(jobfns.add, (1, 2), idempotency_key="half")
        """
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    (job,) = kc.list_jobs()
    state = job.wait(timeout=20)  # known at once: nothing is starting it
    assert state.status is kc.JobStatus.FAILED
    retry = kc.submit(jobfns.add, (1, 2), idempotency_key="half")
    assert retry.attempt == 2 and retry.result(timeout=60) == 3


# ---- 12. the working directory stays importable ----------------------------------------------


@pytest.mark.parametrize("mode", ["1", "0"])
@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_module_in_the_working_directory_is_importable(
    storage_uri: str, tmp_path: Path, private_zygote: str, mode: str, how: str
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "m.py").write_text("def f(x):\n    return x * 2\n")
    code = "import m, kinetic_core as kc\nprint(kc.submit(m.f, (21,)).result(timeout=60))\n"
    env = {**os.environ, "KINETIC_LOCAL_ZYGOTE": mode, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", code] if how == "-c" else [sys.executable, "-"]
    out = subprocess.run(
        argv,
        input=None if how == "-c" else code,
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip() == "42", out.stderr


def test_submit_that_raises_never_runs_the_function(
    storage_uri: str, tmp_path: Path, private_zygote: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor was forked, then its answer was lost: submit raises, nothing runs."""
    traces = tmp_path / "runs"
    traces.mkdir()
    forked: list[int] = []
    name = "read_line" if hasattr(zygote, "read_line") else "_read_line"
    real = getattr(zygote, name)

    def answer_lost(conn: socket.socket) -> bytes:
        forked.append(int(re.findall(rb"\d+", real(conn))[0]))  # the forked supervisor's pid
        raise ConnectionResetError("connection lost")

    monkeypatch.setattr(zygote, name, answer_lost)
    with pytest.raises(kc.SubmissionError):
        kc.submit(chaosfns.trace, (str(traces), 0, 1), idempotency_key="lost")
    (supervisor,) = forked
    _wait_for(lambda: not _pid_alive(supervisor), "the forked supervisor to be gone", 20)
    assert list(traces.iterdir()) == []  # the function never ran
    monkeypatch.setattr(zygote, name, real)
    job = kc.submit(chaosfns.trace, (str(traces), 0, 2), idempotency_key="lost")
    assert job.result(timeout=60) == 2
    assert [p.name for p in traces.iterdir()] == [job.job_id]


def test_signed_launch_record_refuses_a_forgery(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "s3cret")
    job, pid_file, launch_file = _sleeping_job(storage_uri, tmp_path)
    real = json.loads(launch_file.read_text())
    assert real["hmac"] and real["job_id"] == job.job_id
    launch_file.write_text(json.dumps({**real, "launched_at": real["launched_at"] - 1}))
    try:
        fresh = kc.attach(job.job_id)
        state = fresh.state()
        assert "refused" in (state.message or "") and "signature" in (state.message or "")
        fresh.cancel()
        assert _pid_alive(int(pid_file.read_text()))  # the refused record signalled nothing
    finally:
        os.killpg(real["pid"], signal.SIGKILL)


def test_a_supervisor_killed_while_its_runner_waits_for_the_go_leaves_nothing_running(
    storage_uri: str, tmp_path: Path, private_zygote: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner is forked while the submitter confirms and held until the "go": a
    supervisor killed in that window takes the held runner with it (it dies with its
    parent), and the function never runs."""
    from kinetic_core.backends.local import backend as local_backend

    trace = tmp_path / "runs"
    trace.mkdir()
    held: list[int] = []

    def kill_the_supervisor(self: object, job_id: str, channel: socket.socket) -> None:
        channel.settimeout(30)
        supervisor = int(zygote.read_line(channel))
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
        held.extend(int(pid) for pid in children)
        os.kill(supervisor, signal.SIGKILL)
        _wait_for(lambda: not any(map(_pid_alive, held)), "the held runner to die", 10)
        raise kc.SubmissionError("the supervisor died before the go")

    monkeypatch.setattr(local_backend.LocalBackend, "_confirm", kill_the_supervisor)
    with pytest.raises(kc.SubmissionError, match="before the go"):
        kc.submit(chaosfns.trace, (str(trace), 0, 1))
    assert len(held) == 1  # the runner was forked, and held
    assert not any(trace.iterdir())  # the function never ran
