"""A log the browser reads in parts: open on the tail, earlier parts on demand, search.

A job's log may be hundreds of megabytes; the page must neither receive nor hold it all.
The dashboard reads a log only through ``JobHandle.read_logs`` (bounded reads, an opaque
cursor per read, on every backend), and remembers, per log, where each part begins: a
part is at most ``PART_CHARS`` characters of one read, cut at a line end. Part ``k`` is
then one read from its remembered cursor, sliced. The newest read is read again when the
log grew (a read from a cursor returns what follows it, growing while the job writes), so
a running job's last part grows until the backend's read bound and the next one begins.

An index holds a cursor and two numbers per part (a 200 MB log: about 800 parts); the
``LogIndexes`` cache keeps the most recently read ones. Building an index reads the log
once (bounded reads, nothing kept), at most ``READS_PER_REQUEST`` reads per request: a
request that did not reach the end says so (``complete`` False) and the next goes on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: Longest part sent to the browser (characters): the page holds a few at a time.
PART_CHARS = 256 * 1024
#: Reads of the log one request may make while indexing it.
READS_PER_REQUEST = 400
#: Logs whose index is kept (least recently read ones go first).
INDEXES_KEPT = 64
#: Most search hits returned, and the longest line shown of one.
MAX_HITS = 200
HIT_CHARS = 300
#: Longest search text accepted.
QUERY_LIMIT = 200

#: One bounded read: text after a cursor (None: the start) and the next cursor.
Read = Callable[[str | None], tuple[str, str | None]]


@dataclass
class _Part:
    cursor: str | None  # the read this part is sliced from
    start: int
    end: int


@dataclass
class LogIndex:
    """Where each part of one log (one attempt, one worker choice) begins."""

    parts: list[_Part] = field(default_factory=list)
    after: str | None = None  # the cursor after the last read indexed
    started: bool = False
    complete: bool = False  # the last extend reached the log's end (as of then)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def extend(self, read: Read, budget: int = READS_PER_REQUEST) -> bool:
        """Index what the log holds now: the last read again (it may have grown), then
        new reads until one brings nothing or ``budget`` reads are spent. Returns
        whether the end was reached."""
        reads = 0
        if self.parts:
            last = self.parts[-1].cursor
            while self.parts and self.parts[-1].cursor is last:
                self.parts.pop()
            cursor: str | None = last
        elif self.started:
            cursor = self.after
        else:
            cursor = None
        self.started = True
        while reads < budget:
            text, after = read(cursor)
            reads += 1
            if not text:
                self.complete = True
                self.after = cursor if after is None else after
                return True
            self.parts.extend(_Part(cursor, s, e) for s, e in split(text))
            self.after = after
            cursor = after
        self.complete = False
        return False

    def text(self, read: Read, k: int) -> str:
        part = self.parts[k]
        return read(part.cursor)[0][part.start : part.end]


def split(text: str, size: int = PART_CHARS) -> Iterator[tuple[int, int]]:
    """(start, end) of pieces of ``text`` at most ``size`` long, each cut after a line end
    where the piece has one."""
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            cut = text.rfind("\n", start, end)
            end = cut + 1 if cut >= start else end
        yield start, end
        start = end


class LogIndexes:
    """The indexes of the logs read lately, by (storage, job id, worker)."""

    def __init__(self, kept: int = INDEXES_KEPT) -> None:
        self._kept = kept
        self._indexes: OrderedDict[tuple[str, str, int | None], LogIndex] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, key: tuple[str, str, int | None]) -> LogIndex:
        with self._lock:
            index = self._indexes.pop(key, None) or LogIndex()
            self._indexes[key] = index
            while len(self._indexes) > self._kept:
                self._indexes.popitem(last=False)
            return index


def part(index: LogIndex, read: Read, which: int | None, offset: int) -> dict[str, Any]:
    """Part ``which`` (None: the last) of the log from character ``offset`` of it, with
    what the page needs to go on: how many parts there are, the part's size."""
    with index.lock:
        index.extend(read)
        count = len(index.parts)
        if count == 0:
            return {"part": 0, "parts": 0, "text": "", "size": 0, "complete": index.complete}
        k = count - 1 if which is None else which
        if not 0 <= k < count:
            raise IndexError(f"part must be from 0 to {count - 1}, got {which}")
        text = index.text(read, k)
        return {
            "part": k,
            "parts": count,
            "text": text[offset:],
            "offset": offset,
            "size": len(text),
            "complete": index.complete,
        }


def search(index: LogIndex, read: Read, query: str) -> dict[str, Any]:
    """Lines of the log holding ``query`` (any case): part, line within the part, text."""
    needle = query.casefold()
    hits: list[dict[str, Any]] = []
    with index.lock:
        index.extend(read)
        parts = list(index.parts)
        complete = index.complete
    last: tuple[str | None, str] | None = None
    for k, p in enumerate(parts):
        if last is None or last[0] is not p.cursor:
            last = (p.cursor, read(p.cursor)[0])
        for n, line in enumerate(last[1][p.start : p.end].split("\n")):
            if needle in line.casefold():
                hits.append({"part": k, "line": n, "text": line[:HIT_CHARS]})
                if len(hits) >= MAX_HITS:
                    return {"hits": hits, "truncated": True, "complete": complete}
    return {"hits": hits, "truncated": False, "complete": complete}


def stream(read: Read) -> Iterator[bytes]:
    """The whole log as it is now, read by read (bounded memory: a download)."""
    cursor: str | None = None
    while True:
        text, after = read(cursor)
        if not text:
            return
        yield text.encode("utf-8")
        cursor = after
