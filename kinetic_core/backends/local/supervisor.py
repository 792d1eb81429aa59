"""The detached supervisor of one local job (started by the local backend's launch).

It forks the runner (no second interpreter start), enforces ``life_span``, forwards
SIGTERM with a grace period before SIGKILL, and always records how the runner ended in
``exit.json``, even when the runner was killed. Usage (internal):
``python -m kinetic_core.backends.local.supervisor JOB_DIR LIFE_SPAN --storage URI --job-id ID``
Its imports stay stdlib-only (and its package's ``__init__`` loads the backend lazily):
it is on the critical path of every local job.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from types import FrameType


def main(argv: list[str]) -> int:
    job_dir, life_span, runner_argv = argv[0], float(argv[1]), argv[2:]
    # Read per job (a zygote-forked supervisor runs with each submitter's environment).
    kill_grace = float(os.environ.get("KINETIC_KILL_GRACE", "5"))
    child = os.fork()
    if child == 0:
        code = 2
        try:
            from kinetic_core.runner import main as runner_main

            code = runner_main(runner_argv)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    stop_reason: list[str] = []

    def stop(reason: str) -> None:
        if stop_reason:
            return
        stop_reason.append(reason)
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

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if life_span > 0:
        signal.signal(signal.SIGALRM, on_deadline)
        signal.setitimer(signal.ITIMER_REAL, life_span)

    _, status = os.waitpid(child, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    record = describe_exit(status, stop_reason[0] if stop_reason else None, life_span)
    tmp = os.path.join(job_dir, "exit.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, os.path.join(job_dir, "exit.json"))
    return 0


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
    sys.exit(main(sys.argv[1:]))
