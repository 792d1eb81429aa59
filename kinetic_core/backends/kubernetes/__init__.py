"""The kubernetes / gke backend: one ``batch/v1`` Job per kinetic job (see ``backend.py``);
``KIND`` (``kind.py``) is what the core asks of it without a connection: its Target options,
their checks, the Job's name, console links, a driver pod's credentials.

Names load lazily, so ``job_state`` or the accelerator catalogue can be used without
importing the Kubernetes client library (which costs seconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetic_core.util.lazy import exports

_EXPORTS = {
    "KIND": "kind",
    "KubernetesBackend": "backend",
    "LOG_CHUNK_LINES": "backend",
    "KubeApiError": "client",
    "KubeClient": "client",
    "USER_AGENT": "client",
    "DEFAULT_NAMESPACE": "client",
    "ACCELERATORS": "accelerators",
    "accelerator_spec": "accelerators",
    "DEFAULT_IMAGE": "manifest",
    "job_name": "manifest",
    "job_manifest": "manifest",
    "job_state": "states",
}
__all__ = [
    "ACCELERATORS",
    "DEFAULT_IMAGE",
    "DEFAULT_NAMESPACE",
    "KIND",
    "LOG_CHUNK_LINES",
    "USER_AGENT",
    "KubeApiError",
    "KubeClient",
    "KubernetesBackend",
    "accelerator_spec",
    "job_manifest",
    "job_name",
    "job_state",
]

__getattr__ = exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from kinetic_core.backends.kubernetes.accelerators import ACCELERATORS, accelerator_spec
    from kinetic_core.backends.kubernetes.backend import LOG_CHUNK_LINES, KubernetesBackend
    from kinetic_core.backends.kubernetes.client import (
        DEFAULT_NAMESPACE,
        USER_AGENT,
        KubeApiError,
        KubeClient,
    )
    from kinetic_core.backends.kubernetes.kind import KIND
    from kinetic_core.backends.kubernetes.manifest import DEFAULT_IMAGE, job_manifest, job_name
    from kinetic_core.backends.kubernetes.states import job_state
