"""The dashboard's log parts (issue 33, item 5): a log read in bounded reads through an
opaque cursor, cut into parts the page loads one at a time, while it grows."""

from __future__ import annotations

from kinetic_core.ui import logview


class GrowingLog:
    """A log as a backend serves it: reads of at most ``bound`` bytes from an offset
    cursor (a full read cut after its last line end), the text growing as a job writes."""

    def __init__(self, bound: int) -> None:
        self.text = ""
        self.bound = bound
        self.reads = 0

    def read(self, cursor: str | None) -> tuple[str, str | None]:
        self.reads += 1
        start = int(cursor or 0)
        data = self.text[start : start + self.bound]
        if len(data) == self.bound and "\n" in data:
            data = data[: data.rindex("\n") + 1]
        return data, str(start + len(data))


def whole(index: logview.LogIndex, log: GrowingLog) -> str:
    return "".join(index.text(log.read, k) for k in range(len(index.parts)))


def test_parts_cover_a_growing_log_once_each_and_stay_bounded() -> None:
    log = GrowingLog(bound=1000)
    index = logview.LogIndex()
    assert index.extend(log.read) and index.parts == []
    written = ""
    for step in range(40):
        more = "".join(f"step {step} line {n}\n" for n in range(step * 3))
        if step % 7 == 3:
            more += "half a li"  # a line the job has not ended yet
        elif written.endswith("half a li"):
            more = "ne\n" + more
        written += more
        log.text = written
        assert index.extend(log.read)
        assert whole(index, log) == written
    sizes = [p.end - p.start for p in index.parts]
    assert max(sizes) <= 1000 and len(index.parts) > 10


def test_a_read_longer_than_a_part_is_cut_at_line_ends() -> None:
    text = "".join(f"{n:04d} {'y' * 90}\n" for n in range(100))
    pieces = list(logview.split(text, size=1000))
    assert "".join(text[s:e] for s, e in pieces) == text
    assert all(text[e - 1] == "\n" for _, e in pieces)
    assert all(e - s <= 1000 for s, e in pieces)
    assert list(logview.split("z" * 2500, size=1000)) == [(0, 1000), (1000, 2000), (2000, 2500)]


def test_indexing_a_huge_log_goes_on_over_requests() -> None:
    log = GrowingLog(bound=100)
    log.text = "".join(f"{n:05d}\n" for n in range(1000))  # 6,000 bytes: 60 reads
    index = logview.LogIndex()
    assert not index.extend(log.read, budget=25) and not index.complete
    assert index.extend(log.read, budget=100) and index.complete
    assert whole(index, log) == log.text


def test_part_search_and_stream() -> None:
    log = GrowingLog(bound=700)
    log.text = "".join(f"line {n}\n" for n in range(500))
    index = logview.LogIndex()
    last = logview.part(index, log.read, None, 0)
    assert last["part"] == last["parts"] - 1 and last["text"].endswith("line 499\n")
    assert logview.part(index, log.read, 0, 5)["text"].startswith("0\nline 1\n")
    found = logview.search(index, log.read, "LINE 25")
    assert [h["text"] for h in found["hits"]] == ["line 25"] + [
        f"line {n}" for n in range(250, 260)
    ]
    hit = found["hits"][0]
    assert index.text(log.read, hit["part"]).split("\n")[hit["line"]] == "line 25"
    assert b"".join(logview.stream(log.read)).decode() == log.text
