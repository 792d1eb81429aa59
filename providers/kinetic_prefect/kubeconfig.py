"""A kubeconfig given as content: a private file under the kinetic state dir, named by its hash.

The Kubernetes client reads a kubeconfig from a file, and a ``Target`` may only name that
file (targets are written into job handles and logged). Content from a secret block field
is therefore written once to ``~/.kinetic/kubeconfigs/<sha256>.yaml`` (directory 0700,
file 0600) and only the path travels on.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import kinetic_core as kc

STATE_DIR = "~/.kinetic/kubeconfigs"


def kubeconfig_file(content: str) -> str:
    """The path of a private file holding ``content`` (written if missing); ConfigError if
    the content is empty or the file cannot be written."""
    if not content.strip():
        raise kc.ConfigError(
            "kubeconfig_content is empty: paste the kubeconfig file's YAML, or leave it unset."
        )
    folder = Path(os.path.expanduser(STATE_DIR))
    path = folder / f"{hashlib.sha256(content.encode()).hexdigest()}.yaml"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        if not (path.is_file() and path.read_text() == content):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".kubeconfig-")  # created 0600
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write(content)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        os.chmod(path, 0o600)
    except OSError as exc:
        raise kc.ConfigError(
            f"Cannot write the kubeconfig to {folder}: {exc}. Make that folder writable, or "
            "set kubeconfig to the path of a kubeconfig file instead of kubeconfig_content."
        ) from exc
    return str(path)
