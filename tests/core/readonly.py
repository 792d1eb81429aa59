"""Make a local folder really read-only for a while (read-only storage in tests).

``chmod`` does not stop root, so as root the folder is bind-mounted onto itself and
remounted read-only (the kernel then refuses every write with EROFS, whoever asks); as
another user, write permission is taken from it and everything under it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """Within the block, nothing under ``folder`` can be created, changed or deleted."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
            yield
        finally:
            subprocess.run(["umount", str(folder)], check=True)
        return
    modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")] if not p.is_symlink()}
    try:
        for path, mode in modes.items():
            path.chmod(stat.S_IMODE(mode) & ~0o222)
        yield
    finally:
        for path, mode in modes.items():
            path.chmod(stat.S_IMODE(mode))
