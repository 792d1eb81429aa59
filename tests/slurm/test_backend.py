"""The slurm backend through the public API, on the private cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.errors import ConfigError
from tests.slurm import slurm_fns
from tests.slurm.cluster import SlurmCluster


def test_a_job_runs_on_slurm_and_returns_its_value(slurm_target: kc.Target) -> None:
    handle = kc.submit(slurm_fns.add, (2, 3), target=slurm_target)
    assert handle.result(timeout=120) == 5
    state = handle.state()
    assert state.status is kc.JobStatus.SUCCEEDED, state


def test_the_job_runs_as_a_slurm_job_named_after_its_id(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster
) -> None:
    handle = kc.submit(slurm_fns.where, target=slurm_target)
    seen = handle.result(timeout=120)
    assert seen["SLURM_JOB_ID"].isdigit() and seen["SLURMD_NODENAME"].startswith("n"), seen
    name = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", seen["SLURM_JOB_ID"], "-o", "%j")
    assert name.strip() == f"kinetic-{handle.job_id}"
    assert f"worker 0 of 1 on {seen['SLURMD_NODENAME']}" in handle.logs()


def test_result_leaves_a_job_that_ran_to_its_end_completed_in_slurm(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster
) -> None:
    """``result()`` cleans up while the batch job is still exiting: the cleanup lets it end by
    itself (it was cancelled: Slurm's records said CANCELLED although the function succeeded,
    and the wait for scancel's confirmation cost seconds), and nothing of it is left."""
    handle = kc.submit(slurm_fns.add, (2, 3), target=slurm_target)
    assert handle.result(timeout=120) == 5
    name = f"--name=kinetic-{handle.job_id}"
    assert slurm_cluster.run("squeue", "-h", "-t", "all", name, "-o", "%T").split() == ["COMPLETED"]
    assert slurm_cluster.run("squeue", "-h", name, "-o", "%i").split() == []


@pytest.mark.parametrize(
    ("option", "word"),
    [
        ({"partition": "no such"}, "partition"),
        ({"memory": "lots"}, "memory"),
        ({"gpus": 0}, "gpus"),
        ({"cpus": 0}, "cpus"),
        ({"sbatch_args": ["--job-name=x"]}, "--job-name"),
        ({"sbatch_args": ["-p", "main"]}, "long sbatch flag"),
        ({"slurm_dir": "relative/dir"}, "slurm_dir"),
    ],
)
def test_a_malformed_option_is_refused_before_anything_is_written(
    slurm_target: kc.Target, storage_uri: str, option: dict[str, object], word: str
) -> None:
    with pytest.raises(ConfigError, match=word):
        kc.submit(slurm_fns.add, (1, 1), target=slurm_target.merge(option))
    assert not list(Path(storage_uri[len("file://") :]).glob("jobs/*"))


@pytest.mark.parametrize(
    "option",
    [{"partition": "nosuchpartition"}, {"num_hosts": 9}, {"sbatch_args": ["--nosuchflag"]}],
)
def test_an_option_slurm_refuses_is_refused_before_anything_is_written(
    slurm_target: kc.Target, storage_uri: str, option: dict[str, object]
) -> None:
    """sbatch --test-only asks the controller: an unknown partition, more nodes than the
    cluster has, a flag sbatch does not know."""
    with pytest.raises(ConfigError, match="Slurm refused"):
        kc.submit(slurm_fns.add, (1, 1), target=slurm_target.merge(option))
    assert not list(Path(storage_uri[len("file://") :]).glob("jobs/*"))


def test_a_multi_node_job_is_one_allocation_with_one_runner_per_node(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster
) -> None:
    """num_hosts=2: one Slurm job on two nodes; each worker knows its place from Slurm's
    variables (kc.worker(), RANK/WORLD_SIZE, MASTER_ADDR: the first node's name, as Slurm
    scripts set it); worker 0's value is the result;
    each worker has its own log."""
    handle = kc.submit(slurm_fns.where, target=slurm_target.merge({"num_hosts": 2}))
    seen = handle.result(timeout=180)
    assert (seen["index"], seen["RANK"], seen["WORLD_SIZE"]) == ("0", "0", "2"), seen
    nodes = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", seen["SLURM_JOB_ID"], "-o", "%N")
    hosts = slurm_cluster.run("scontrol", "show", "hostnames", nodes.strip()).split()
    assert len(hosts) == 2 and seen["MASTER_ADDR"] == hosts[0] == seen["SLURMD_NODENAME"], seen
    assert "worker 0 of 2" in handle.logs(worker=0)
    assert "worker 1 of 2" in handle.logs(worker=1)


@pytest.mark.parametrize(("gpus", "devices"), [(1, "0"), (2, "0,1")])
def test_a_job_asking_for_gpus_gets_them_from_slurm(
    slurm_target: kc.Target, gpus: int, devices: str
) -> None:
    """The private cluster's nodes have 2 fake GPUs each (gres.conf, /dev/null's device
    under other names): Slurm schedules them and sets the variables frameworks read."""
    seen = kc.submit(slurm_fns.gpus_seen, target=slurm_target.merge({"gpus": gpus})).result(
        timeout=120
    )
    assert seen["CUDA_VISIBLE_DEVICES"] == seen["SLURM_JOB_GPUS"] == devices, seen
    assert seen["SLURM_GPUS_ON_NODE"] == str(gpus), seen


def test_more_gpus_than_a_node_has_are_refused_before_anything_is_written(
    slurm_target: kc.Target, storage_uri: str
) -> None:
    with pytest.raises(ConfigError, match="Slurm refused"):
        kc.submit(slurm_fns.add, (1, 1), target=slurm_target.merge({"gpus": 3}))
    assert not list(Path(storage_uri[len("file://") :]).glob("jobs/*"))
