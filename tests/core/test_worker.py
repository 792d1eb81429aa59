"""``kc.worker()`` and the framework variables of a multi-host job's workers.

Reading the environment is checked in real subprocesses (the environment a worker pod
gets), and ``framework_env`` is checked against what JAX's GKE TPU detection and
PyTorch's ``env://`` rendezvous read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import kinetic_core as kc
from kinetic_core.util.workers import DEFAULT_COORDINATOR_PORT, framework_env

HOSTS = [f"kinetic-abc-w-0-{i}.kinetic-abc" for i in range(4)]


def _worker_in_subprocess(env: dict[str, str]) -> dict[str, object]:
    """``kc.worker()`` as a fresh process with exactly ``env`` (plus PATH) sees it."""
    code = (
        "import dataclasses, json, kinetic_core as kc; "
        "w = kc.worker(); print(json.dumps({**dataclasses.asdict(w), "
        "'is_coordinator': w.is_coordinator, 'hostname': w.hostname}))"
    )
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME")}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_a_single_host_or_local_job_is_worker_0_of_1() -> None:
    assert _worker_in_subprocess({}) == {
        "index": 0,
        "count": 1,
        "coordinator": f"localhost:{DEFAULT_COORDINATOR_PORT}",
        "hostnames": ["localhost"],
        "is_coordinator": True,
        "hostname": "localhost",
    }
    assert kc.worker() == kc.Worker.from_env({})  # this test process is no worker either


@pytest.mark.parametrize("accelerator", ["tpu", "gpu"])
def test_each_worker_reads_back_what_framework_env_gives_it(accelerator: str) -> None:
    for index in range(4):
        env = framework_env(index, 4, HOSTS, 8476, accelerator)  # type: ignore[arg-type]
        seen = _worker_in_subprocess(env)
        assert seen["index"] == index and seen["count"] == 4
        assert seen["hostnames"] == HOSTS and seen["hostname"] == HOSTS[index]
        assert seen["coordinator"] == f"{HOSTS[0]}:8476"
        assert seen["is_coordinator"] == (index == 0)


def test_what_gkes_tpu_webhook_injects_is_enough() -> None:
    """A pod with only GKE's variables (no kinetic ones) still knows its place."""
    worker = kc.Worker.from_env({"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": ",".join(HOSTS)})
    assert worker == kc.Worker(
        index=2, count=4, coordinator=f"{HOSTS[0]}:8476", hostnames=tuple(HOSTS)
    )


def test_an_indexed_job_pod_takes_its_completion_index() -> None:
    env = {
        "JOB_COMPLETION_INDEX": "3",
        "KINETIC_WORKER_COUNT": "4",
        "KINETIC_WORKER_HOSTNAMES": ",".join(HOSTS),
        "KINETIC_COORDINATOR_ADDRESS": f"{HOSTS[0]}:29500",
    }
    worker = kc.Worker.from_env(env)
    assert (worker.index, worker.coordinator, worker.hostname) == (3, f"{HOSTS[0]}:29500", HOSTS[3])


def test_tpu_variables_are_what_jax_gke_tpu_detection_reads() -> None:
    """jax/_src/clusters/cloud_tpu_cluster.py (GkeTpuCluster): detected by
    TPU_WORKER_HOSTNAMES; process id = int(TPU_WORKER_ID); count = len(hostnames);
    coordinator = hostnames[0]:8476. JAX_COORDINATOR_ADDRESS stays unset so JAX waits
    for worker 0's name to resolve; no MEGASCALE_* for a single slice."""
    env = framework_env(1, 4, HOSTS, accelerator="tpu")
    hostnames = env["TPU_WORKER_HOSTNAMES"].split(",")
    assert int(env["TPU_WORKER_ID"]) == 1 and len(hostnames) == 4
    assert f"{hostnames[0]}:8476" == env["KINETIC_COORDINATOR_ADDRESS"]
    assert "JAX_COORDINATOR_ADDRESS" not in env
    assert not [k for k in env if k.startswith("MEGASCALE_")]


def test_gpu_variables_name_the_jax_coordinator() -> None:
    env = framework_env(2, 3, HOSTS[:3], 1234, "gpu")
    assert env["JAX_COORDINATOR_ADDRESS"] == f"{HOSTS[0]}:1234"
    assert "TPU_WORKER_ID" not in env and "TPU_WORKER_HOSTNAMES" not in env


@pytest.mark.parametrize("accelerator", ["tpu", "gpu", "cpu"])
def test_pytorch_env_rendezvous_variables(accelerator: str) -> None:
    """torch.distributed's env:// rendezvous reads MASTER_ADDR/PORT, WORLD_SIZE, RANK;
    one process per host, so LOCAL_RANK is 0 and NODE_RANK is the worker index."""
    env = framework_env(3, 4, HOSTS, 29500, accelerator)  # type: ignore[arg-type]
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")} == {
        "MASTER_ADDR": HOSTS[0],
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "4",
        "RANK": "3",
    }
    assert (env["LOCAL_RANK"], env["NODE_RANK"]) == ("0", "3")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((4, 4, HOSTS), "worker index 4 is not one of 4 workers"),
        ((-1, 4, HOSTS), "worker index -1 is not one of 4 workers"),
        ((0, 0, []), "not one of 0 workers"),
        ((0, 4, HOSTS[:3]), "4 workers need 4 hostnames"),
        ((0, 2, ["a", ""]), "2 workers need 2 hostnames"),
    ],
)
def test_framework_env_refuses_an_impossible_worker(args: tuple[object, ...], says: str) -> None:
    with pytest.raises(kc.ConfigError, match=says):
        framework_env(*args)  # type: ignore[arg-type]


def test_framework_env_refuses_an_unknown_accelerator_kind() -> None:
    with pytest.raises(kc.ConfigError, match="'tpu', 'gpu' or 'cpu'"):
        framework_env(0, 1, ["h"], accelerator="qpu")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"KINETIC_WORKER_COUNT": "4"}, "no KINETIC_WORKER_HOSTNAMES"),
        ({"KINETIC_WORKER_INDEX": "x"}, "KINETIC_WORKER_INDEX='x' is not a whole number"),
        ({"TPU_WORKER_ID": "5", "TPU_WORKER_HOSTNAMES": "a,b"}, "index 5 is not one of 2"),
        (
            {"KINETIC_WORKER_COUNT": "3", "KINETIC_WORKER_HOSTNAMES": "a,b"},
            "3 workers need 3 hostnames",
        ),
    ],
)
def test_a_malformed_worker_environment_is_a_config_error(env: dict[str, str], says: str) -> None:
    with pytest.raises(kc.ConfigError, match=says):
        kc.Worker.from_env(env)
