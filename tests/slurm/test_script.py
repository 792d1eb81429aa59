"""The sbatch command line and batch script one job gets (pure: no cluster)."""

from __future__ import annotations

import kinetic_core as kc
from kinetic_core.backends.slurm.script import GRACE_S, batch_script, sbatch_argv, time_limit
from kinetic_core.control.launching import launch_spec

JOB = "job-20261128t000000-0123abcd"


def _argv(**options: object) -> list[str]:
    target = kc.Target(backend="slurm", storage="file:///shared/store", **options)  # type: ignore[arg-type]
    return sbatch_argv(launch_spec(JOB, "file:///shared/store", target, {}), "/shared/slurm/x")


def test_every_option_is_its_sbatch_flag() -> None:
    argv = _argv(
        partition="gpu",
        account="ml-team",
        qos="high",
        cpus=8,
        memory="64G",
        gpus="a100:4",
        constraint="ib&h100",
        life_span=3600,
        num_hosts=2,
        sbatch_args=["--exclusive", "--mail-type=END"],
    )
    assert argv[:2] == ["sbatch", "--parsable"]
    for flag in (
        f"--job-name=kinetic-{JOB}",
        "--output=/shared/slurm/x/batch.log",
        "--no-requeue",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--account=ml-team",
        "--qos=high",
        "--cpus-per-task=8",
        "--mem=64G",
        "--gres=gpu:a100:4",
        "--constraint=ib&h100",
        f"--time={time_limit(3600)}",
        f"--signal=TERM@{GRACE_S}",
    ):
        assert flag in argv, (flag, argv)
    assert argv[-2:] == ["--exclusive", "--mail-type=END"]  # last: the escape hatch


def test_the_time_limit_is_life_span_plus_the_grace_in_whole_minutes() -> None:
    assert time_limit(3600) == str(60 + 1)  # 3,660 s: 61 minutes
    assert time_limit(1) == "2"  # 61 s rounds up
    assert _argv(gpus=2).count("--gres=gpu:2") == 1


def test_no_option_no_flag() -> None:
    argv = _argv()
    for flag in ("--partition", "--account", "--qos", "--cpus-per-task", "--mem", "--gres"):
        assert not any(a.startswith(flag) for a in argv), argv
    assert not any(a.startswith(("--time", "--signal", "--constraint")) for a in argv), argv


def test_the_batch_script_runs_one_runner_per_node() -> None:
    target = kc.Target(backend="slurm", storage="file:///s", num_hosts=3)
    script = batch_script(launch_spec(JOB, "file:///s", target, {}), "/f", "/venv/bin/python")
    last = script.splitlines()[-1]
    assert last.startswith("exec srun --nodes=3 --ntasks=3 --ntasks-per-node=1"), last
    assert "KINETIC_WORKER_INDEX=$SLURM_PROCID" in last and "/venv/bin/python" in last
    assert "export KINETIC_COORDINATOR_ADDRESS=" in script
