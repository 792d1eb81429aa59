"""Envelope bodies hashed in chunks: written at the speed of the disk, read and checked on
all cores, and never handed to the unpickler unchecked.

A body is cut into ``CHUNK``-sized spans at fixed offsets and the writer records each
span's digest; the list goes into the envelope's signed header (``digest_of`` binds it).
The digest is sha256 (envelope format 2) or, where the optional ``blake3`` package is
installed (the ``fast`` extra), BLAKE3 (format 3): 256 bits as well, faster on one core
(~2.4 GB/s against ~1.4 GB/s for sha256 on a CPU with SHA extensions; wider without).
The writer hands the body to the file in pieces of ``WRITE_PIECE`` bytes, however large the
pickler's writes: the page cache then takes folios of that size, not 2 MiB ones.
The reader hands pickle only bytes of spans whose digest matched, so a body is read once:
there is no separate verification pass, and nothing can change between the check and the
unpickling. Large values (``bytes``, ``bytearray``, NumPy arrays) are read by pickle with
``readinto`` straight into the new object; the reader fills that memory on all cores at
once, each thread reading and hashing its own spans (os.preadv and hashlib release the
GIL), so a 1 GiB argument arrives with one copy.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Callable
from typing import IO, Any

from kinetic_core.errors import PayloadIntegrityError
from kinetic_core.storage import write_failed
from kinetic_core.util.parallel import CORES, parallel

CHUNK = 8 << 20
#: The largest single write: Linux fills the page cache of a larger write with 2 MiB
#: folios, which cost 3-5x more per byte to allocate than 256 KiB ones where free memory
#: is handed back to a hypervisor (a 2-core VM: 1 GiB into a new file took 2.34 s as one
#: write, 0.44 s in 256 KiB writes, 0.67 s in 64 KiB ones). Elsewhere it costs ~4,000
#: system calls per GiB, a few milliseconds.
WRITE_PIECE = 256 << 10
SHA256 = "sha256"
BLAKE3 = "blake3"


def blake3_available() -> bool:
    """Whether the optional ``blake3`` package (the ``fast`` extra) can be imported (asked
    per envelope, not cached: a cached import is a dict lookup)."""
    try:
        import blake3  # noqa: F401
    except ImportError:
        return False
    return True


def hash_function(algorithm: str) -> Callable[..., Any]:
    """The constructor of ``algorithm``'s hash objects (``update``/``hexdigest``).
    ``blake3`` raises ImportError where the package is missing."""
    if algorithm == BLAKE3:
        from blake3 import blake3

        return blake3
    return hashlib.sha256


def digest_of(chunk: int, digests: list[str], algorithm: str = SHA256) -> str:
    """The body's sha256: over the chunk size, the chunk digest's algorithm (BLAKE3 only:
    format 2's value stays as it was) and every chunk's digest, in order."""
    label = "" if algorithm == SHA256 else f"{algorithm} "
    sha = hashlib.sha256(f"kinetic-chunks {label}{chunk}\n".encode())
    for digest in digests:
        sha.update(bytes.fromhex(digest))
    return sha.hexdigest()


class HashingWriter:
    """File-like for the pickler: writes through to ``fh`` and records the sha256 of every
    CHUNK written. The whole chunks of a large write (the pickler hands a big value over
    in one call) are hashed on all cores while this thread writes them.

    A failed write (a full disk) becomes a StorageError here, so that it is never
    mistaken for an object that cannot be pickled.
    """

    def __init__(self, fh: IO[bytes], where: str, algorithm: str = SHA256) -> None:
        self.fh = fh
        self.where = where
        self.chunk = CHUNK
        self.size = 0
        self.digests: list[str] = []
        self.algorithm = algorithm
        self._new = hash_function(algorithm)
        self._open = self._new()  # the chunk being filled

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        pos = 0
        chunk = self.chunk
        filled = self.size % chunk
        if filled:  # complete the open chunk first
            pos = min(n, chunk - filled)
            self._open.update(view[:pos])
            if filled + pos == chunk:
                self._close()
        whole = [view[i : i + chunk] for i in range(pos, n - chunk + 1, chunk)]
        pos += len(whole) * chunk
        hashed = [""] * len(whole)

        def hash_one(i: int) -> None:
            hashed[i] = self._new(whole[i]).hexdigest()

        if whole:
            hasher = threading.Thread(target=parallel, args=(hash_one, range(len(whole)), CORES))
            hasher.start()
            try:
                self.write_through(view)
            finally:
                hasher.join()
            self.digests.extend(hashed)
        else:
            self.write_through(view)
        self._open.update(view[pos:])
        self.size += n
        return n

    def write_through(self, data: Any) -> int:
        """Write without hashing (the header after the body)."""
        try:
            return write_in_pieces(self.fh, data)
        except OSError as exc:
            raise write_failed(self.where, exc) from exc

    def finish(self) -> list[str]:
        """The chunk digests of everything written."""
        if self.size % self.chunk:
            self._close()
        return self.digests

    def _close(self) -> None:
        self.digests.append(self._open.hexdigest())
        self._open = self._new()


def write_in_pieces(fh: IO[bytes], data: Any) -> int:
    """Write all of ``data`` to ``fh`` in writes of at most ``WRITE_PIECE`` bytes."""
    view = memoryview(data).cast("B")
    at = 0
    while at < len(view):
        written = fh.write(view[at : at + WRITE_PIECE])
        at += min(WRITE_PIECE, len(view) - at) if written is None else written
    return len(view)


class VerifiedReader:
    """File-like for the unpickler over the body at the start of ``fh``. It hands out only
    bytes of chunks whose sha256 matched ``digests`` (a list the caller checked against
    the signed header), so nothing unverified reaches pickle. A mismatch or a short file
    raises PayloadIntegrityError, which aborts the unpickling."""

    def __init__(
        self,
        fh: IO[bytes],
        *,
        size: int,
        digests: list[str],
        chunk: int,
        where: str,
        algorithm: str = SHA256,
    ) -> None:
        self._new = hash_function(algorithm)
        self._algorithm = algorithm
        self._fd = fh.fileno()  # both storages read through a real (possibly temporary) file
        self._size = size
        self._digests = digests
        self._chunk = chunk
        self._where = where
        self._pos = 0
        self._buf = bytearray()  # one verified chunk, for small reads
        self._buf_at = 0

    def read(self, n: int | None = -1) -> bytes:
        left = self._size - self._pos
        n = left if n is None or n < 0 else min(n, left)
        if n == 0:
            return b""
        head = self._buffered()
        if len(head) >= n:
            self._pos += n
            return bytes(head[:n])
        out = bytearray(n)
        self.readinto(out)
        return bytes(out)

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = min(len(view), self._size - self._pos)
        done = 0
        while done < n:
            if not self._has(self._pos) and self._pos % self._chunk == 0:
                moved = self._fill_whole(view[done:n])
                if moved:
                    done += moved
                    continue
            head = self._buffered()[: n - done]
            view[done : done + len(head)] = head
            done += len(head)
            self._pos += len(head)
        return n

    def readline(self) -> bytes:
        out = bytearray()
        while self._pos < self._size:
            head = self._buffered()
            newline = self._buf.find(b"\n", self._pos - self._buf_at)
            end = len(head) if newline < 0 else newline + 1 - (self._pos - self._buf_at)
            out += head[:end]
            self._pos += end
            if newline >= 0:
                break
        return bytes(out)

    # ---- chunks ---------------------------------------------------------------------------
    def _span(self, index: int) -> tuple[int, int]:
        start = index * self._chunk
        return start, min(self._chunk, self._size - start)

    def _has(self, pos: int) -> bool:
        return self._buf_at <= pos < self._buf_at + len(self._buf)

    def _buffered(self) -> memoryview:
        """Verified bytes from the current position to the end of its chunk."""
        if not self._has(self._pos):
            start, length = self._span(self._pos // self._chunk)
            buf = bytearray(length)
            self._fill(start // self._chunk, memoryview(buf))
            self._buf, self._buf_at = buf, start
        return memoryview(self._buf)[self._pos - self._buf_at :]

    def _fill_whole(self, dest: memoryview) -> int:
        """Read the whole chunks that fit in ``dest`` (from the current position, a chunk
        start) straight into it, on all cores; the bytes moved (0: not one fits)."""
        end = self._pos + len(dest)
        first = self._pos // self._chunk
        last = len(self._digests) if end == self._size else end // self._chunk
        if last <= first:
            return 0
        base = self._pos

        def fill(index: int) -> None:
            start, length = self._span(index)
            self._fill(index, dest[start - base : start - base + length])

        parallel(fill, range(first, last), CORES)
        moved = min(last * self._chunk, self._size) - base
        self._pos += moved
        return moved

    def _fill(self, index: int, into: memoryview) -> None:
        """Read chunk ``index`` into ``into`` (its exact size) and check its digest."""
        start, length = self._span(index)
        done = 0
        while done < length:
            got = os.preadv(self._fd, [into[done:]], start + done)
            if not got:
                raise PayloadIntegrityError(f"{self._where} is truncated: it is corrupt.")
            done += got
        if not hmac.compare_digest(self._new(into).hexdigest(), self._digests[index]):
            raise PayloadIntegrityError(
                f"{self._where} failed its {self._algorithm} check (chunk {index}): it is "
                "corrupt or was modified."
            )
