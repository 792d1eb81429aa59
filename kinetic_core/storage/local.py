"""file:// storage: atomic renames, create-only via link(2), directories mode 0700.

Writes stage under ``tmp/``; a staging file's name carries its writer's pid and start
time, so files of writers that were killed are swept by the next writer. OS errors
become the protocol's in one place (``LocalStorage._errors``): FileNotFoundError and
FileExistsError are signals callers act on and pass as they are; every other OSError
(read-only, permissions, full disk, I/O) becomes ``StorageError``.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import time
from contextlib import contextmanager, suppress

from kinetic_core.errors import StorageError
from kinetic_core.storage import storage_failed, write_failed
from kinetic_core.util.procs import process_alive, start_ticks

# Paths are str and os.path, neither pathlib nor typing at run time: a job's runner opens
# its storage before its function starts (``runtime/runner.py``, ``bench/runner_start.py``).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import BinaryIO

# Staging files without a live writer in their name are swept once older than this.
STALE_STAGING = 3600.0
_WRITER = re.compile(r"\.w(\d+)-(\d+)\.")
_STAGED_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


class LocalStorage:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.root = os.path.normpath(uri[len("file://") :] or ".")
        self._swept = False
        self._writer: tuple[int, str] = (0, "")
        self._serial = itertools.count()
        self._dirs: set[str] = set()  # folders known to exist (put_file's fast path)

    def path(self, key: str) -> str:
        return os.path.join(self.root, key)

    def location(self, key: str) -> str:
        return f"file://{self.path(key)}"

    @contextmanager
    def _errors(self, doing: str, key: str) -> Iterator[None]:
        """THE mapping of OSErrors to the protocol's errors (see the module docstring)."""
        try:
            yield
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError as exc:
            raise storage_failed(doing, self.location(key), exc) from exc

    def _ensure_dir(self, directory: str) -> None:
        """Create ``directory`` and any missing parents with mode 0700."""
        missing = []
        while directory and not os.path.exists(directory):
            missing.append(directory)
            directory = os.path.dirname(directory)
        try:
            for d in reversed(missing):
                with suppress(FileExistsError):
                    os.mkdir(d, 0o700)
        except OSError as exc:
            raise StorageError(
                f"Storage root {self.uri} is not writable ({exc.strerror}: {exc.filename}). "
                "Fix its permissions or point KINETIC_STORAGE / storage= at a writable directory."
            ) from exc

    def read_bytes(self, key: str) -> bytes:
        # A str path and no context manager: status resolution reads thousands of small
        # records a second (a shared poller's tick), where pathlib cost more than the read.
        try:
            with open(os.path.join(self.root, key), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise storage_failed("read", self.location(key), exc) from exc

    def write_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> None:
        with self.open_write(key, create_only=create_only) as fh:
            try:
                fh.write(data)
            except OSError as exc:
                raise write_failed(self.location(key), exc) from exc

    @contextmanager
    def open_read(self, key: str) -> Iterator[BinaryIO]:
        with self._errors("read", key):
            fh = open(self.path(key), "rb")  # noqa: SIM115 (closed below, around the yield)
        with fh:
            yield fh

    @contextmanager
    def open_write(self, key: str, *, create_only: bool = False) -> Iterator[BinaryIO]:
        target = self.path(key)
        with self._errors("write", key):
            if create_only and os.path.exists(target):  # fail fast; link() is the real guard
                raise FileExistsError(target)
            # Stage under tmp/ (same filesystem): a failed write leaves nothing beside ``key``.
            tmp = self._staged(target)
            fd = self._open_staged(tmp)
        try:
            fh = os.fdopen(fd, "wb")
            try:
                yield fh
            except BaseException:
                with suppress(OSError):  # the caller's error is the one to report
                    fh.close()
                raise
            with self._errors("write", key):
                fh.close()  # flushes: a full disk may only show here
                self._publish(tmp, target, create_only)
        finally:
            with suppress(OSError):  # gone once published; else the next writer sweeps it
                os.unlink(tmp)

    def _staged(self, target: str) -> str:
        """Where ``target`` is staged: ``tmp/{name}.w{pid}-{ticks}.{serial}.tmp``, unique to
        this process (``_sweep`` removes a dead writer's). The first call sweeps tmp/."""
        staging = os.path.join(self.root, "tmp")
        if not self._swept:
            self._ensure_dir(staging)
            self._swept = True
            _sweep(staging)
        name = os.path.basename(target)
        return os.path.join(staging, f"{name}.{self._writer_name()}.{next(self._serial)}.tmp")

    def _open_staged(self, tmp: str) -> int:
        try:
            return os.open(tmp, _STAGED_FLAGS, 0o600)
        except FileNotFoundError:  # tmp/ swept away by a cleanup: once more
            self._ensure_dir(os.path.dirname(tmp))
            return os.open(tmp, _STAGED_FLAGS, 0o600)

    def _publish(self, tmp: str, target: str, create_only: bool) -> None:
        """Move the staged file to ``target`` atomically: ``link`` when ``create_only``
        (FileExistsError if someone won), else ``replace``. Folders known to exist are
        not checked again; one deleted meanwhile is created once more."""
        parent = os.path.dirname(target)
        if parent not in self._dirs:
            self._ensure_dir(parent)
            self._dirs.add(parent)
        try:
            os.link(tmp, target) if create_only else os.replace(tmp, target)
        except FileNotFoundError:
            self._dirs.discard(parent)
            self._ensure_dir(parent)
            os.link(tmp, target) if create_only else os.replace(tmp, target)

    def _writer_name(self) -> str:
        """``w{pid}-{start ticks}`` in staged files' names (``_sweep`` reads it back to tell
        a dead writer's leftovers), read from /proc once per process, not per write."""
        pid = os.getpid()
        if self._writer[0] != pid:  # a forked child writes as itself
            self._writer = (pid, f"w{pid}-{start_ticks(pid) or 0}")
        return self._writer[1]

    def exists(self, key: str) -> bool:
        with self._errors("read", key):
            return os.path.exists(self.path(key))

    def put_file(self, key: str, source: str, *, create_only: bool = False) -> None:
        """``open_write``'s staging and publishing, minus its per-call setup: the data
        plane sends thousands of files, where that setup cost more than the copy."""
        with self._errors("write", key):
            self._put_file(key, source, create_only)

    def _put_file(self, key: str, source: str, create_only: bool) -> None:
        import shutil  # here, as below: a runner opens file:// before its job starts

        target = self.path(key)
        if create_only and os.path.exists(target):
            raise FileExistsError(target)
        tmp = self._staged(target)
        try:
            try:
                shutil.copyfile(source, tmp)  # sendfile(2): in the kernel
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) and not os.path.exists(os.path.dirname(tmp)):
                    self._ensure_dir(os.path.dirname(tmp))  # swept away by a cleanup: once more
                    shutil.copyfile(source, tmp)
                else:
                    raise write_failed(self.location(key), exc) from exc
            self._publish(tmp, target, create_only)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)

    def get_file(self, key: str, dest: str) -> None:
        with self._errors("read", key), open(self.path(key), "rb") as src, open(dest, "wb") as fh:
            copy_stream(src, fh)

    def walk(self, prefix: str) -> list[str]:
        base = self.path(prefix)
        found = []
        with self._errors("list", prefix):
            for folder, dirs, files in os.walk(base, onerror=_raise_unless_absent):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                rel = os.path.relpath(folder, base)
                found += [n if rel == "." else f"{rel}/{n}" for n in files if not n.startswith(".")]
        return sorted(found)

    def local_path(self, key: str) -> str | None:
        return self.path(key)

    def list_names(self, prefix: str) -> list[str]:
        try:
            names = os.listdir(self.path(prefix))
        except (FileNotFoundError, NotADirectoryError):
            if os.path.exists(self.root) and not os.path.isdir(self.root):
                raise StorageError(
                    f"Storage root {self.uri} is a file, not a directory: point "
                    "KINETIC_STORAGE / storage= (or --storage) at a directory."
                ) from None
            return []
        except OSError as exc:
            raise storage_failed("list", self.location(prefix), exc) from exc
        return sorted(n for n in names if not n.startswith("."))

    def delete(self, key: str) -> None:
        path = self.path(key)
        with self._errors("delete", key):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                if os.path.lexists(path):  # a read-only volume refuses even absent names
                    raise

    def delete_prefix(self, prefix: str) -> None:
        """Everything under ``prefix`` goes, or StorageError says why not (a read-only
        volume is not silently left in place); what is already absent is fine."""
        import shutil

        with self._errors("delete", prefix):
            if sys.version_info >= (3, 12):
                shutil.rmtree(self.path(prefix), onexc=_absent_is_fine)
            else:
                shutil.rmtree(
                    self.path(prefix), onerror=lambda f, p, e: _absent_is_fine(f, p, e[1])
                )


def _raise_unless_absent(exc: OSError) -> None:
    """``os.walk``'s error hook: a folder deleted meanwhile (or never there) is skipped."""
    if not isinstance(exc, FileNotFoundError | NotADirectoryError):
        raise exc


def _absent_is_fine(func: object, path: str, exc: BaseException) -> None:
    """``rmtree``'s error hook: a file or folder deleted meanwhile (or never there) is
    what we wanted; anything else is raised."""
    if not isinstance(exc, FileNotFoundError | NotADirectoryError):
        raise exc


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
    import shutil

    shutil.copyfileobj(src, dst, 1 << 20)


def _sweep(staging: str) -> None:
    """Remove staging files whose writer is dead (killed mid-write)."""
    try:
        names = os.listdir(staging)
    except OSError:
        return
    for name in names:
        path = os.path.join(staging, name)
        match = _WRITER.search(name)
        try:
            if match:
                if process_alive(int(match[1]), int(match[2]) or None):
                    continue
            elif os.stat(path).st_mtime > time.time() - STALE_STAGING:
                continue
            os.unlink(path)
        except OSError:
            pass
