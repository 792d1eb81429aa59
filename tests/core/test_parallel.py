"""The thread count of the data plane follows a container's CPU limit (cgroup v1 and v2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinetic_core.util.parallel import quota_cores

V2 = "0::/kubepods/pod1/ctr\n"
V1 = "3:cpuset:/\n2:cpu,cpuacct:/kubepods/pod1/ctr\n1:memory:/kubepods/pod1/ctr\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("text", "cores"), [("250000 100000\n", 3), ("50000 100000\n", 1), ("max 100000\n", None)]
)
def test_cgroup_v2_cpu_max_in_the_process_cgroup(tmp_path: Path, text: str, cores: int) -> None:
    write(tmp_path / "cpu.max", "max 100000\n")  # the root: no limit
    write(tmp_path / "kubepods/pod1/ctr/cpu.max", text)
    assert quota_cores(tmp_path, V2) == cores


def test_cgroup_v2_inside_a_cgroup_namespace_reads_the_root(tmp_path: Path) -> None:
    write(tmp_path / "cpu.max", "400000 100000\n")
    assert quota_cores(tmp_path, "0::/\n") == 4
    assert quota_cores(tmp_path, V2) == 4  # own folder not visible: the root is ours


@pytest.mark.parametrize(("quota", "cores"), [("150000", 2), ("-1", None)])
def test_cgroup_v1_cfs_quota(tmp_path: Path, quota: str, cores: int | None) -> None:
    write(tmp_path / "cpu/kubepods/pod1/ctr/cpu.cfs_quota_us", quota + "\n")
    write(tmp_path / "cpu/kubepods/pod1/ctr/cpu.cfs_period_us", "100000\n")
    assert quota_cores(tmp_path, V1) == cores


def test_no_cgroup_files_or_unreadable_ones_mean_no_limit(tmp_path: Path) -> None:
    assert quota_cores(tmp_path, V2) is None
    assert quota_cores(tmp_path, "") is None
    write(tmp_path / "cpu.max", "garbage\n")
    assert quota_cores(tmp_path, "0::/\n") is None
    write(tmp_path / "cpu.max", "100000 0\n")
    assert quota_cores(tmp_path, "0::/\n") is None
