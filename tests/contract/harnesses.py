"""Every backend the contract runs: name -> its harness. A new backend adds one line."""

from __future__ import annotations

from tests.contract.harness import Harness
from tests.contract.kubernetes_harness import KubernetesHarness
from tests.contract.local_harness import LocalHarness
from tests.contract.slurm_harness import SlurmHarness

HARNESSES: dict[str, type[Harness]] = {
    "local": LocalHarness,
    "kubernetes": KubernetesHarness,
    "slurm": SlurmHarness,
}
#: Backends whose launch can meet a transient fault outlasting the retry policy.
WITH_LASTING_FAULT = [name for name, h in HARNESSES.items() if h.has_lasting_fault]
