"""The detached supervisor of one local job (started by the local backend's launch).

Its first act is to claim the job: it writes ``launch.json`` (its own pid and process
start time) create-only, so a job never runs without a record naming its process. It then
tells the submitter its pid and runs nothing until the submitter confirms ("go"): a
submitter that dies or fails before confirming leaves an aborted job that ran nothing.
It forks the runner while the submitter confirms (no second interpreter start; the runner
is held until the "go" and dies with it), enforces ``life_span``, forwards SIGTERM with a
grace period before SIGKILL, kills what the job left in its process group, and always
records how the runner ended in ``exit.json``.
Usage (internal): ``python -m kinetic_core.backends.local.supervisor [--detach] JOB_DIR
LIFE_SPAN --storage URI --job-id ID`` with the submitter's end of the launch channel in
``KINETIC_LAUNCH_FD``. Imports stay stdlib-only (its packages load lazily): it is on the
critical path of every local job; so its reason words are spelled here, each a member of
``kinetic_core.states.Reason`` (a test holds them to it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from types import FrameType

import kinetic_core.backends.local.launch_record as launch_record
from kinetic_core.util.procs import adopt_orphans, die_with_parent, reap_descendants, start_ticks

# How long a forked supervisor waits for the submitter's "go" before giving up.
CONFIRM_TIMEOUT = 60.0
GO = b"g"  # to the held runner: run the job


def main(argv: list[str], channel: socket.socket | None = None) -> int:
    if argv[:1] == ["--detach"]:  # started by a submitter: leave it (no zombie), lead a session
        argv = argv[1:]
        if os.fork():
            os._exit(0)
        os.setsid()
    job_dir, life_span, runner_argv = argv[0], float(argv[1]), argv[2:]
    if channel is None and os.environ.get("KINETIC_LAUNCH_FD"):
        channel = socket.socket(fileno=int(os.environ.pop("KINETIC_LAUNCH_FD")))
    # Read per job (a zygote-forked supervisor runs with each submitter's environment).
    kill_grace = float(os.environ.get("KINETIC_KILL_GRACE", "5"))
    stop_reason: list[str] = []
    child = 0

    def stop(reason: str) -> None:
        if stop_reason:
            return
        stop_reason.append(reason)
        if not child:
            return  # not let go yet: the runner is never started
        try:
            os.kill(child, signal.SIGTERM)
        except ProcessLookupError:
            return
        signal.signal(signal.SIGALRM, lambda *_: _kill(child))
        signal.setitimer(signal.ITIMER_REAL, kill_grace)

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop("Cancelled")

    def on_deadline(signum: int, frame: FrameType | None) -> None:
        stop("DeadlineExceeded")

    signal.signal(signal.SIGTERM, on_term)  # before the claim: a cancel may follow it at once
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _claim(job_dir, runner_argv):
        return 2
    exit_path = os.path.join(job_dir, launch_record.EXIT)
    adopt_orphans()  # what the job leaves running becomes ours to end with it
    # The runner is forked while the submitter confirms (a fork costs milliseconds); it
    # waits for the word and, without it, ends having touched nothing of the job.
    runner, go = _fork_runner(runner_argv, channel)
    if channel is not None and not _confirmed(channel):
        _abandon(runner, go)
        _record(exit_path, _not_started("Aborted", "the submitter did not confirm the launch"))
        return 0
    # SIGTERM waits while the runner is let go: a cancel arriving now must find it to stop.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if stop_reason:
        _abandon(runner, go)
        _record(exit_path, _not_started(stop_reason[0], "stopped before the job started"))
        return 0
    child = runner
    with contextlib.suppress(OSError):  # it died already (a killpg): its exit says how
        os.write(go, GO)
    os.close(go)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if life_span > 0:
        signal.signal(signal.SIGALRM, on_deadline)
        signal.setitimer(signal.ITIMER_REAL, life_span)
    _, status = os.waitpid(child, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    reap_descendants()
    _final_sync(runner_argv)
    _record(exit_path, describe_exit(status, stop_reason[0] if stop_reason else None, life_span))
    return 0


def _fork_runner(runner_argv: list[str], channel: socket.socket | None) -> tuple[int, int]:
    """Fork the runner, held until ``GO`` arrives on the returned pipe (EOF: it exits
    without running anything). Returns (its pid, the pipe's write end). The submitter's
    channel is the supervisor's alone: the runner closes its copy."""
    me = os.getpid()
    held, go = os.pipe()
    pid = os.fork()
    if pid:
        os.close(held)
        return pid, go
    code = 2
    try:
        os.close(go)
        if channel is not None:
            channel.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a cancel now: nothing ran, just end
        signal.signal(signal.SIGINT, signal.default_int_handler)
        die_with_parent(me)  # a killed supervisor never leaves its runner behind
        if os.read(held, len(GO)) != GO:
            os._exit(0)
        os.close(held)
        import atexit

        atexit._clear()  # the zygote's and this supervisor's exit callbacks are not the job's
        from kinetic_core.runtime import runner

        runner.exit_now(runner.main(runner_argv))  # its threads and atexit callbacks, as in a pod
    finally:  # an exception escaped: end without the parent's teardown either
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _abandon(runner: int, go: int) -> None:
    """End a held runner that must not run, and reap it (it ran nothing)."""
    os.close(go)
    _kill(runner)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(runner, 0)


def _final_sync(runner_argv: list[str]) -> None:
    """The runner syncs its outputs as it ends; if it was killed first, do it for it."""
    try:
        from kinetic_core.data.outputs import finish

        storage_uri = runner_argv[runner_argv.index("--storage") + 1]
        finish(storage_uri, runner_argv[runner_argv.index("--job-id") + 1])
    except Exception as exc:  # the exit record below must be written whatever happens
        print(f"kinetic supervisor: outputs not synced: {exc}", file=sys.stderr, flush=True)


def _claim(job_dir: str, runner_argv: list[str]) -> bool:
    """Write the launch record; False if the job's directory is gone (launch aborted)."""
    pid = os.getpid()
    record = {
        "job_id": runner_argv[runner_argv.index("--job-id") + 1],
        "pid": pid,
        "start_ticks": start_ticks(pid),
        "host": socket.gethostname(),
        "launched_at": time.time(),
    }
    signed = launch_record.sign(record, os.environ.get("KINETIC_SIGNING_KEY") or None)
    try:
        launch_record.write_create_only(os.path.join(job_dir, launch_record.LAUNCH), signed)
    except OSError as exc:
        print(f"kinetic supervisor: not starting: {exc}", file=sys.stderr, flush=True)
        return False
    return True


def _confirmed(channel: socket.socket) -> bool:
    """Send our pid to the submitter and wait for its "go" (EOF: it died or gave up)."""
    try:
        with channel:
            channel.settimeout(CONFIRM_TIMEOUT)
            channel.sendall(f"{os.getpid()}\n".encode())
            return channel.recv(16) == b"go"
    except OSError:
        return False


def _record(path: str, record: dict[str, object]) -> None:
    try:
        launch_record.write(path, record)
    except OSError:
        pass  # the job's directory was deleted (cleanup or an aborted launch)


def _not_started(reason: str, why: str) -> dict[str, object]:
    """The exit record of a runner never let go: ``ran`` False is what the batch driver
    asks (such an attempt is not one of a child's tries)."""
    return {
        "exit_code": None,
        "reason": reason,
        "message": f"{why}; the function never ran",
        "finished_at": time.time(),
        "ran": False,
    }


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def describe_exit(status: int, stop_reason: str | None, life_span: float) -> dict[str, object]:
    """Exit code (128+signal when killed), reason and a message a person can act on."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        code = 128 + sig
        name = signal.Signals(sig).name
        reason = stop_reason or ("Killed" if sig == signal.SIGKILL else "Signaled")
        message = f"runner was killed by {name} (signal {sig})"
    else:
        code = os.WEXITSTATUS(status)
        reason = stop_reason or ("Completed" if code == 0 else "Error")
        message = f"runner exited with code {code}"
    if stop_reason == "DeadlineExceeded":
        message = f"life_span of {life_span:g}s exceeded; {message}"
    return {"exit_code": code, "reason": reason, "message": message, "finished_at": time.time()}


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: the job reads terminal once this process is gone
