"""The local backend's kind: what the core asks of it without starting anything.

Imported by every ``Target.validate``: keeps to the standard library until ``create`` or
``cache_key`` needs the backend module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetic_core.backends import Backend, BackendKind, PlainKind
from kinetic_core.util import signing

if TYPE_CHECKING:
    from kinetic_core.config.target import Target


class LocalKind(PlainKind):
    """Jobs are detached processes on this machine, addressed by job id; no consoles."""

    options = frozenset({"local_dir"})
    #: Its jobs share this machine's filesystem: a Data arrives as a path, not at a mount.
    supports_volumes = False

    def create(self, target: Target) -> Backend:
        from kinetic_core.backends.local.backend import LocalBackend

        return LocalBackend.from_target(target)

    def cache_key(self, target: Target) -> tuple[object, ...]:
        """One instance per folder, storage and signing key IN FORCE (argument, else the
        environment now): after ``KINETIC_SIGNING_KEY`` changes, new jobs and observers
        get a backend holding the new key, not the one first read."""
        from kinetic_core.backends.local.backend import default_local_dir

        return (default_local_dir(target), target.storage, signing.key_in_force(target.signing_key))


KIND: BackendKind = LocalKind()
