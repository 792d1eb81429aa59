"""Job bodies for the Kubernetes tests, shipped by value (pods do not import tests/)."""

from __future__ import annotations

import os
import sys
import time


def square(x: int) -> dict[str, object]:
    return {"square": x * x, "job_id": os.environ.get("KINETIC_JOB_ID")}


def talk_then_exit(lines: int, code: int) -> None:
    for i in range(lines):
        print(f"step {i}", flush=True)
    sys.stdout.flush()
    os._exit(code)


def slow_talk(lines: int, pause: float) -> int:
    for i in range(lines):
        print(f"tick {i}", flush=True)
        time.sleep(pause)
    return lines


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def record_run(path: str, seconds: float) -> int:
    """Append one line per run of the function to ``path``, then sleep: counts executions."""
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    with open(path) as fh:
        return len(fh.read().splitlines())


def checkpointed(workdir: str, steps: int = 10) -> dict[str, object]:
    """Checkpoints each step in ``workdir``; the first run stops half-way and waits to be
    disrupted, saving a last checkpoint from its preemption callback. Later runs resume."""
    import kinetic_core as kc

    job_id = os.environ["KINETIC_JOB_ID"]
    checkpoint = os.path.join(workdir, "checkpoint")
    start = _resume_point(checkpoint)
    with open(os.path.join(workdir, "starts"), "a") as fh:
        fh.write(f"{job_id} {start}\n")

    @kc.on_preemption
    def save() -> None:
        with open(os.path.join(workdir, "notice"), "w") as fh:
            fh.write(f"{job_id} saved on SIGTERM, preempted={kc.preempted()}")

    _steps(checkpoint, start, steps, os.path.join(workdir, "halfway"), job_id)
    with open(os.path.join(workdir, "completions"), "a") as fh:
        fh.write(f"{job_id}\n")
    return {"resumed_from": start, "job_id": job_id}


def exit_with(code: int) -> None:
    raise SystemExit(code)


def pod_view(
    names: list[str], mount: str, wait_for: str, read: tuple[str, ...] = ()
) -> dict[str, object]:
    """What the job's process sees: env values and the files under a mounted volume, once a
    sidecar has written ``wait_for`` there (the test node agent maps mount paths to per-pod
    folders and says where in NODE_AGENT_MOUNTS)."""
    import json

    folder = json.loads(os.environ.get("NODE_AGENT_MOUNTS", "{}")).get(mount, mount)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, wait_for)) and time.monotonic() < deadline:
        time.sleep(0.1)
    print("the kinetic container speaks", flush=True)
    with open(os.path.join(folder, "from-runner"), "w") as fh:
        fh.write("hello")
    mounts = json.loads(os.environ.get("NODE_AGENT_MOUNTS", "{}"))

    def local(path: str) -> str:
        for mounted, where in mounts.items():
            if path.startswith(mounted + "/"):
                return where + path[len(mounted) :]
        return path

    return {
        "read": {path: open(local(path)).read() for path in read},
        "env": {n: os.environ.get(n) for n in names},
        "files": sorted(os.listdir(folder)),
        "sidecar_wrote": open(os.path.join(folder, wait_for)).read().strip(),
    }


def slotted(value: int, slots: str, then_sleep: float = 0.3) -> int:
    """Records its run (``{slots}.runs``) and how many children held a slot when it
    started (``{slots}.seen-{value}``), as tests/core/batch_helpers.slotted does."""
    with open(f"{slots}.runs", "a") as fh:
        fh.write(f"{value} {os.getpid()}\n")
    held = os.path.join(slots, f"{value}-{os.getpid()}")
    open(held, "w").close()
    try:
        with open(f"{slots}.seen-{value}-{os.getpid()}", "w") as fh:
            fh.write(str(len(os.listdir(slots))))
        time.sleep(then_sleep)
        return value
    finally:
        os.unlink(held)


def data_round_trip(arg: str, mounted: str) -> dict[str, object]:
    """Read a Data argument and a Data volume; write the output folder."""
    with open(arg) as fh:
        text = fh.read()
    names = sorted(os.listdir(mounted))
    with open(os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "seen.txt"), "w") as fh:
        fh.write(text + "|" + ",".join(names))
    return {"arg": text, "mounted": names, "out": os.environ["KINETIC_OUTPUT_DIR"]}


def where_am_i() -> dict[str, object]:
    return {
        "cwd": os.getcwd(),
        "cwd_entries": sorted(os.listdir(".")),
        "env": sorted(os.environ),
    }


def journaled(path: str, shutdown_seconds: float) -> str:
    """Appends "<job id> <event>" lines to ``path``: start, and for the first run (which
    waits to be stopped) a save that takes ``shutdown_seconds`` on SIGTERM; later runs
    finish at once. Tells whether two runs of one job ever overlapped."""
    import kinetic_core as kc

    job_id = os.environ["KINETIC_JOB_ID"]

    def log(event: str) -> None:
        with open(path, "a") as fh:
            fh.write(f"{job_id} {event}\n")

    first = not os.path.exists(path)
    log("start")

    @kc.on_preemption
    def save() -> None:
        time.sleep(shutdown_seconds)
        log("saved")

    if first:
        time.sleep(600)  # until its pod or Job is deleted
    log("done")
    return job_id


def resumable_in_outputs(workdir: str, steps: int = 10) -> dict[str, object]:
    """Checkpoints each step in its own output folder (KINETIC_OUTPUT_DIR, which a
    recovered attempt starts with); appends "<job id> <first step>" to ``workdir/starts``
    at each run (counts runs across attempts). The first run stops half-way and waits for
    its node to go."""
    job_id = os.environ["KINETIC_JOB_ID"]
    checkpoint = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "checkpoint")
    start = _resume_point(checkpoint)
    with open(os.path.join(workdir, "starts"), "a") as fh:
        fh.write(f"{job_id} {start}\n")
    _steps(checkpoint, start, steps, os.path.join(workdir, "halfway"), job_id)
    return {"resumed_from": start, "job_id": job_id}


# ---- multi-host (issue 19): every worker runs the same function ------------------------------
def _worker_view() -> dict[str, object]:
    """What the runner told this worker about its place in the slice.
    TODO(slice-runner): assert TPU_WORKER_ID / TPU_WORKER_HOSTNAMES here once the per-worker
    runner applies framework_env; until then the KINETIC_WORKER_* variables are the contract."""
    import kinetic_core as kc

    me = kc.worker()
    return {
        "index": me.index,
        "count": me.count,
        "env_index": os.environ.get("KINETIC_WORKER_INDEX"),
        "hostnames": list(me.hostnames),
        "coordinator": os.environ.get("KINETIC_COORDINATOR_ADDRESS"),
        "hostname": os.environ.get("HOSTNAME"),
    }


def exchange_ranks(workdir: str) -> object:
    """Each worker writes its view to ``workdir/rank-<i>``; worker 0 waits for all and
    returns them (its value is the job's result); the others return their index."""
    import json

    view = _worker_view()
    with open(os.path.join(workdir, f"rank-{view['index']}.tmp"), "w") as fh:
        json.dump(view, fh)
    os.replace(
        os.path.join(workdir, f"rank-{view['index']}.tmp"),
        os.path.join(workdir, f"rank-{view['index']}"),
    )
    if view["index"] != 0:
        return view["index"]
    count = int(str(view["count"]))
    deadline = time.time() + 120
    names = [os.path.join(workdir, f"rank-{i}") for i in range(count)]
    while not all(os.path.exists(n) for n in names) and time.time() < deadline:
        time.sleep(0.2)
    views = []
    for name in names:
        with open(name) as fh:
            views.append(json.load(fh))
    return views


def one_worker_fails(workdir: str, failing: int, code: int = 3) -> None:
    """Every worker records its pid; worker ``failing`` exits ``code`` once all started,
    the others sleep until stopped."""
    import kinetic_core as kc

    me = kc.worker()
    with open(os.path.join(workdir, f"pid-{me.index}"), "w") as fh:
        fh.write(str(os.getpid()))
    if me.index == failing:
        deadline = time.time() + 120
        while time.time() < deadline and not all(
            os.path.exists(os.path.join(workdir, f"pid-{i}")) for i in range(me.count)
        ):
            time.sleep(0.2)
        raise SystemExit(code)
    time.sleep(600)


def all_workers_sleep(workdir: str) -> None:
    """Every worker records its pid, then sleeps until stopped."""
    import kinetic_core as kc

    with open(os.path.join(workdir, f"pid-{kc.worker().index}"), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(600)


def slice_resumable(workdir: str, steps: int = 10) -> dict[str, object]:
    """Worker 0 checkpoints in KINETIC_OUTPUT_DIR (as ``resumable_in_outputs``) and appends
    "<job id> 0 <first step>" to ``workdir/starts``; worker k appends "<job id> k". In the
    first attempt every worker waits for the reclaim (worker 0 half-way); later ones end."""
    import kinetic_core as kc

    me = kc.worker()
    job_id = os.environ["KINETIC_JOB_ID"]
    halfway = os.path.join(workdir, "halfway")
    if me.index != 0:
        with open(os.path.join(workdir, "starts"), "a") as fh:
            fh.write(f"{job_id} {me.index}\n")
        first = not os.path.exists(halfway) or _read(halfway) == job_id
        if first:
            time.sleep(600)  # until the slice is reclaimed
        return {"worker": me.index}
    checkpoint = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "checkpoint")
    start = _resume_point(checkpoint)
    with open(os.path.join(workdir, "starts"), "a") as fh:
        fh.write(f"{job_id} 0 {start}\n")
    deadline = time.time() + 120  # a rendezvous, as jax.distributed.initialize() is
    while time.time() < deadline:
        if (
            sum(
                line.startswith(job_id)
                for line in _read(os.path.join(workdir, "starts")).split("\n")
            )
            >= me.count
        ):
            break
        time.sleep(0.2)
    _steps(checkpoint, start, steps, halfway, job_id)
    return {"resumed_from": start, "job_id": job_id}


def slice_journaled(path: str, shutdown_seconds: float) -> str:
    """Every worker appends "<job id> <worker> <event>" lines to ``path``: start; in
    attempt 1 (a keyed job id ending ``-1``, which waits to be stopped) its process traps
    SIGTERM and keeps running ``shutdown_seconds`` (as a process flushing its work does,
    whatever the runner would do), then appends "stopped" and exits 143; later attempts
    finish at once. Tells whether two attempts of one gang ever ran at once. Worker 0's
    value is its job id."""
    import signal

    import kinetic_core as kc

    job_id = os.environ["KINETIC_JOB_ID"]
    me = kc.worker()

    def log(event: str) -> None:
        with open(path, "a") as fh:
            fh.write(f"{job_id} {me.index} {event}\n")

    if job_id.endswith("-1"):

        def stop(signum: int, frame: object) -> None:
            time.sleep(shutdown_seconds)
            log("stopped")
            os._exit(143)

        signal.signal(signal.SIGTERM, stop)
        log(f"start pid={os.getpid()}")
    else:  # which processes of earlier attempts still live (pods of the agent run here)
        log(f"start beside={_alive_elsewhere(path, job_id)}")
    if job_id.endswith("-1"):
        time.sleep(600)  # until its pod is stopped
    log("done")
    return job_id


def _alive_elsewhere(path: str, job_id: str) -> list[int]:
    """The pids journaled by other attempts whose process still runs (not a zombie)."""
    alive = []
    for line in _read(path).splitlines():
        words = line.split()
        if words[0] == job_id or not words[-1].startswith("pid="):
            continue
        pid = int(words[-1][4:])
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except OSError:
            continue
    return alive


def _resume_point(checkpoint: str) -> int:
    """The step an earlier run checkpointed (0 for a first run)."""
    return int(_read(checkpoint)) if os.path.exists(checkpoint) else 0


def _steps(checkpoint: str, start: int, steps: int, halfway: str, job_id: str) -> None:
    """Checkpoint each step; a first run (from 0) writes ``halfway`` at half-way and then
    waits to be disrupted (its node reclaimed, its pod deleted)."""
    for step in range(start, steps):
        with open(checkpoint + ".tmp", "w") as fh:
            fh.write(str(step + 1))
        os.replace(checkpoint + ".tmp", checkpoint)
        if start == 0 and step + 1 == steps // 2:
            with open(halfway, "w") as fh:
                fh.write(job_id)
            time.sleep(600)  # until the disruption ends this process


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()
