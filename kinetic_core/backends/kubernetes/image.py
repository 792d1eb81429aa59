"""The runner container's image, and what ``requirements=`` adds to it at pod start.

An image comes from ``image=`` (``KINETIC_IMAGE``, a connection's or block's ``image``) or
from the runner container of ``pod_template``. Without either, the default tag is used
only on a **local cluster**, one whose API server is on a loopback address (kind, k3d,
minikube or Docker Desktop with a loopback API server, the test cluster): there, an image
loaded into the cluster under that tag (``kind load docker-image …``) runs. Anywhere else
no node could pull an unqualified local tag, so the submit is a ``ConfigError`` before
anything is created, saying how to build and push the project's Dockerfile.

``requirements=[...]`` starts the pod with ``python -m kinetic_core.runtime.bootstrap`` (it
installs them with uv into an environment cached under ``CACHE_PATH``, then runs the
runner there). The cache is an ``emptyDir`` unless the target mounts its own volume at
``CACHE_PATH`` (a PVC or hostPath: environments then outlive pods).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from kinetic_core.config.kubeconfig import is_reference
from kinetic_core.errors import ConfigError
from kinetic_core.runtime.bootstrap import CACHE_ENV, DEFAULT_CACHE, REQUIREMENTS_ENV

if TYPE_CHECKING:
    from kinetic_core.config.target import Target

#: What the project's Dockerfile builds (``docker build -t kinetic-workflows-runner:0.1.0 .``).
DEFAULT_IMAGE = "kinetic-workflows-runner:0.1.0"
CACHE_PATH = DEFAULT_CACHE
CACHE_VOLUME = "kinetic-env-cache"
BOOTSTRAP = ["-m", "kinetic_core.runtime.bootstrap"]


def is_local_server(server: str) -> bool:
    """The API server is on this machine (a loopback address or ``localhost``)."""
    host = urlparse(server if "://" in server else f"https://{server}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# The API server of each set of credentials read so far (``_credentials``): reading a
# kubeconfig (YAML) and building a client for it cost ~10 ms a submit, twice (the check
# and the launch both build the Job), a third of a submit's time (issue 37).
_servers: dict[tuple[Any, ...], str] = {}
_SERVERS_MAX = 64


def _credentials(target: Target) -> tuple[Any, ...]:
    """What decides the server a target reaches: its kubeconfig (content, or the file as
    it is now: path, size, mtime), context, in-cluster switch and the environment that
    names a default kubeconfig or the in-cluster server."""
    env = tuple(
        os.environ.get(k)
        for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    )
    path = target.kubeconfig
    if path is None or is_reference(path):
        path = (os.environ.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep)[0]
    stat: tuple[int, int] | None = None
    with contextlib.suppress(OSError, ValueError):
        found = os.stat(os.path.expanduser(path))
        stat = (found.st_size, found.st_mtime_ns)
    return (target.kubeconfig, target.kube_context, target.in_cluster, env, path, stat)


def api_server(target: Target) -> str:
    """The API server the target reaches, read from its credentials (nothing is sent);
    remembered per set of credentials (``_credentials``)."""
    from kinetic_core.backends.kubernetes.client import KubeClient

    key = _credentials(target)
    server = _servers.get(key)
    if server is not None:
        return server
    client = KubeClient(target)
    try:
        server = str(client.api.configuration.host)
    finally:
        client.close()
    if len(_servers) >= _SERVERS_MAX:
        _servers.clear()
    _servers[key] = server
    return server


def default_image(target: Target) -> str:
    """The default image where it can work (a local cluster); ConfigError elsewhere."""
    server = api_server(target)
    if is_local_server(server):
        return DEFAULT_IMAGE
    raise ConfigError(
        f"No runner image: image= is not set and the Kubernetes API server {server} is not a "
        f"local cluster (one on a loopback address: kind, minikube, the test cluster), so no "
        f"node could pull the default {DEFAULT_IMAGE!r}. Build the project's Dockerfile with "
        "your submitter's Python minor and push it where your nodes pull from: `docker build "
        "--build-arg PYTHON_VERSION=3.11 -t REGISTRY/kinetic-runner:0.1.0 . && docker push "
        "REGISTRY/kinetic-runner:0.1.0`; then set Target(image='REGISTRY/kinetic-runner:0.1.0') "
        "(or KINETIC_IMAGE, or the image field of the Airflow connection or Prefect block), "
        "or give the runner container an image in pod_template. See docs/kubernetes.md, "
        "'The runner image'."
    )


def check_requirements(requirements: Any) -> None:
    """ConfigError unless ``requirements`` is a non-empty list of requirement strings
    (pip syntax, one package each: options such as ``--index-url`` belong in the env)."""
    if requirements is None:
        return
    if (
        not isinstance(requirements, list)
        or not requirements
        or not all(
            isinstance(r, str) and r.strip() and "\n" not in r and not r.lstrip().startswith("-")
            for r in requirements
        )
    ):
        raise ConfigError(
            f"requirements must be a non-empty list of requirement strings such as "
            f"['tabulate==0.9.0', 'six>=1.16'], got {requirements!r} (an index goes in "
            "env={'UV_INDEX_URL': ...}; from the environment: KINETIC_REQUIREMENTS as a JSON "
            "list or comma-separated)."
        )


def add_bootstrap(
    t: Target, command: list[str], container: dict[str, Any], pod_spec: dict[str, Any]
) -> list[str]:
    """With ``requirements``: the bootstrap's command, its env, and the cache volume (unless
    the target mounts its own there). Returns the container's command."""
    if not t.requirements:
        return command
    container["env"].extend(
        [
            {"name": REQUIREMENTS_ENV, "value": json.dumps(t.requirements)},
            {"name": CACHE_ENV, "value": CACHE_PATH},
        ]
    )
    if CACHE_PATH not in (t.volumes or {}):
        container.setdefault("volumeMounts", []).append(
            {"name": CACHE_VOLUME, "mountPath": CACHE_PATH}
        )
        pod_spec.setdefault("volumes", []).append({"name": CACHE_VOLUME, "emptyDir": {}})
    return [command[0], *BOOTSTRAP, *command[1:]]
