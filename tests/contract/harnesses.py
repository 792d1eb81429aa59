"""Every backend the contract runs: name -> its harness. A new backend adds one line.

``kubernetes`` is a single-host job (one ``batch/v1`` Job, one pod); ``jobset`` the same
backend's multi-host variant, a gang of 2 workers (one JobSet, 2 child Jobs, 2 pods) on
the same test cluster, with its own faults (``jobset_harness.py``).
"""

from __future__ import annotations

from tests.contract.harness import Harness
from tests.contract.jobset_harness import JobSetHarness
from tests.contract.kubernetes_harness import KubernetesHarness
from tests.contract.local_harness import LocalHarness
from tests.contract.slurm_harness import SlurmHarness

HARNESSES: dict[str, type[Harness]] = {
    "local": LocalHarness,
    "kubernetes": KubernetesHarness,
    "jobset": JobSetHarness,
    "slurm": SlurmHarness,
}
#: Backends whose launch can meet a transient fault outlasting the retry policy.
WITH_LASTING_FAULT = [name for name, h in HARNESSES.items() if h.has_lasting_fault]
