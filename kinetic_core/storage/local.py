"""file:// storage: atomic renames, create-only via link(2), directories mode 0700.

Writes stage under ``tmp/``; a staging file's name carries its writer's pid and start
time, so files of writers that were killed are swept by the next writer.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from kinetic_core.errors import StorageError
from kinetic_core.procs import process_alive, start_ticks
from kinetic_core.storage import write_failed

# Staging files without a live writer in their name are swept once older than this.
STALE_STAGING = 3600.0
_WRITER = re.compile(r"\.w(\d+)-(\d+)\.")


class LocalStorage:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.root = Path(uri[len("file://") :])
        self._swept = False
        self._writer: tuple[int, str] = (0, "")
        self._serial = itertools.count()
        self._dirs: set[Path] = set()  # folders known to exist (put_file's fast path)

    def path(self, key: str) -> Path:
        return self.root / key

    def location(self, key: str) -> str:
        return f"file://{self.path(key)}"

    def _ensure_dir(self, directory: Path) -> None:
        """Create ``directory`` and any missing parents with mode 0700."""
        missing = []
        while not directory.exists():
            missing.append(directory)
            directory = directory.parent
        try:
            for d in reversed(missing):
                d.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Storage root {self.uri} is not writable ({exc.strerror}: {exc.filename}). "
                "Fix its permissions or point KINETIC_STORAGE / storage= at a writable directory."
            ) from exc

    def read_bytes(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    def write_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> None:
        with self.open_write(key, create_only=create_only) as fh:
            try:
                fh.write(data)
            except OSError as exc:
                raise write_failed(self.location(key), exc) from exc

    @contextmanager
    def open_read(self, key: str) -> Iterator[BinaryIO]:
        with open(self.path(key), "rb") as fh:
            yield fh

    @contextmanager
    def open_write(self, key: str, *, create_only: bool = False) -> Iterator[BinaryIO]:
        target = self.path(key)
        if create_only and target.exists():  # fail fast; link() below is the real guard
            raise FileExistsError(str(target))
        # Stage under tmp/ (same filesystem) so a failed write leaves nothing beside ``key``.
        staging = self.root / "tmp"
        self._ensure_dir(staging)
        if not self._swept:
            self._swept = True
            _sweep(staging)
        writer = f"w{os.getpid()}-{start_ticks(os.getpid()) or 0}"
        try:
            fd, tmp = tempfile.mkstemp(
                prefix=f"{target.name}.{writer}.", suffix=".tmp", dir=staging
            )
        except OSError as exc:
            raise StorageError(f"Cannot write {self.location(key)}: {exc}") from exc
        try:
            fh = os.fdopen(fd, "wb")
            try:
                yield fh
            except BaseException:
                with suppress(OSError):  # the caller's error is the one to report
                    fh.close()
                raise
            try:
                fh.close()  # flushes: a full disk may only show here
            except OSError as exc:
                raise write_failed(self.location(key), exc) from exc
            self._ensure_dir(target.parent)
            if create_only:
                os.link(tmp, target)  # atomic, fails with FileExistsError if someone won
            else:
                os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def put_file(self, key: str, source: str, *, create_only: bool = False) -> None:
        """``open_write``'s staging and publishing, minus its per-call setup: the data
        plane sends thousands of files, where that setup cost more than the copy."""
        target = self.path(key)
        if create_only and target.exists():
            raise FileExistsError(str(target))
        staging = self.root / "tmp"
        if not self._swept:
            self._ensure_dir(staging)
            self._swept = True
            _sweep(staging)
        pid = os.getpid()
        if self._writer[0] != pid:
            self._writer = (pid, f"w{pid}-{start_ticks(pid) or 0}")
        tmp = staging / f"{target.name}.{self._writer[1]}.{next(self._serial)}.tmp"
        try:
            try:
                shutil.copyfile(source, tmp)  # sendfile(2): in the kernel
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) and not staging.exists():
                    self._ensure_dir(staging)  # swept away by a cleanup: once more
                    shutil.copyfile(source, tmp)
                else:
                    raise write_failed(self.location(key), exc) from exc
            if target.parent not in self._dirs:
                self._ensure_dir(target.parent)
                self._dirs.add(target.parent)
            try:
                if create_only:
                    os.link(tmp, target)  # atomic, FileExistsError if someone won
                else:
                    os.replace(tmp, target)
            except FileNotFoundError:  # the folder was deleted meanwhile
                self._dirs.discard(target.parent)
                self._ensure_dir(target.parent)
                os.link(tmp, target) if create_only else os.replace(tmp, target)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)

    def get_file(self, key: str, dest: str) -> None:
        with open(self.path(key), "rb") as src, open(dest, "wb") as fh:
            copy_stream(src, fh)

    def walk(self, prefix: str) -> list[str]:
        base = self.path(prefix)
        found = []
        for folder, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            rel = os.path.relpath(folder, base)
            found += [n if rel == "." else f"{rel}/{n}" for n in files if not n.startswith(".")]
        return sorted(found)

    def local_path(self, key: str) -> str | None:
        return str(self.path(key))

    def list_names(self, prefix: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.path(prefix)) if not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            if self.root.exists() and not self.root.is_dir():
                raise StorageError(
                    f"Storage root {self.uri} is a file, not a directory: point "
                    "KINETIC_STORAGE / storage= (or --storage) at a directory."
                ) from None
            return []

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self.path(prefix), ignore_errors=True)


def copy_stream(src: BinaryIO, dst: BinaryIO) -> None:
    """Copy file to file in the kernel (copy_file_range: no user-space buffer, a reflink
    where the filesystem can) and in 1 MiB chunks where it cannot: the data plane's copies
    never hold a whole file in memory."""
    dst.flush()
    start_in, start_out = src.tell(), dst.tell()
    try:
        while os.copy_file_range(src.fileno(), dst.fileno(), 1 << 30):
            pass
        return
    except OSError:  # not supported here (another filesystem kind, a pipe): plain chunks
        src.seek(start_in)
        dst.seek(start_out)
        dst.truncate()
    shutil.copyfileobj(src, dst, 1 << 20)


def _sweep(staging: Path) -> None:
    """Remove staging files whose writer is dead (killed mid-write)."""
    try:
        names = os.listdir(staging)
    except OSError:
        return
    for name in names:
        path = staging / name
        match = _WRITER.search(name)
        try:
            if match:
                if process_alive(int(match[1]), int(match[2]) or None):
                    continue
            elif path.stat().st_mtime > time.time() - STALE_STAGING:
                continue
            path.unlink()
        except OSError:
            pass
