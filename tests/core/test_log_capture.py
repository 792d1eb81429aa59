"""The runner's log in storage: the chunk writer (bounds, the end, storage refusing) and the
fd-level capture in a real process (print, raw fds, a child, ``os._exit``, SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from kinetic_core.records import layout
from kinetic_core.records.log_chunks import ChunkWriter, read_all, read_at, read_meta
from kinetic_core.storage import Storage
from kinetic_core.storage.local import LocalStorage
from tests.core.readonly import read_only

JOB = "job-logs"


def _store(tmp_path: Path) -> LocalStorage:
    root = tmp_path / "store"
    root.mkdir(exist_ok=True)
    return LocalStorage(f"file://{root}")


def _chunks(storage: Storage) -> dict[str, bytes]:
    folder = layout.log_stream_dir(JOB)
    return {
        name: storage.read_bytes(f"{folder}/{name}")
        for name in storage.list_names(folder)
        if name.endswith(".log")
    }


def _read_by_cursor(storage: Storage, chunk_bytes: int) -> bytes:
    out, offset = b"", 0
    while True:
        data, offset = read_at(storage, JOB, offset, chunk_bytes=chunk_bytes)
        if not data:
            return out
        out += data


def test_chunks_are_bounded_and_read_back_whole(tmp_path: Path) -> None:
    storage = _store(tmp_path)
    writer = ChunkWriter(storage, JOB, chunk_bytes=16)
    writer.begin()
    text = b"".join(b"line %d\n" % i for i in range(20))
    for i in range(0, len(text), 7):  # fed in pieces that straddle chunk ends
        writer.feed(text[i : i + 7])
        assert writer.flush()
    chunks = _chunks(storage)
    assert len(chunks) == -(-len(text) // 16)
    assert all(len(data) <= 16 for data in chunks.values())
    assert b"".join(chunks[name] for name in sorted(chunks)) == text
    assert read_all(storage, JOB) == text.decode()
    assert read_all(storage, JOB, tail=2) == "line 18\nline 19\n"
    assert _read_by_cursor(storage, 16) == text


def test_the_open_chunk_grows_in_place_and_the_end_is_marked(tmp_path: Path) -> None:
    storage = _store(tmp_path)
    writer = ChunkWriter(storage, JOB, chunk_bytes=1024)
    writer.begin()
    assert read_meta(storage, JOB) == {"started_ns": writer.started_ns, "chunk_bytes": 1024}
    writer.feed(b"first\n")
    writer.flush()
    writer.feed(b"second, unfinished")
    assert read_all(storage, JOB) == "first\n"  # not flushed yet
    assert writer.end()
    assert list(_chunks(storage)) == ["00000000.log"]
    assert read_all(storage, JOB) == "first\nsecond, unfinished"
    assert (read_meta(storage, JOB) or {}).get("ended_ns", 0) >= writer.started_ns


def test_a_refusing_storage_never_fails_the_job_and_catches_up(tmp_path: Path) -> None:
    storage = _store(tmp_path)
    said: list[str] = []
    writer = ChunkWriter(storage, JOB, chunk_bytes=8, warn=said.append)
    writer.begin()
    with read_only(tmp_path / "store"):
        writer.feed(b"aaaaaaa\nbbbbbbb\ncc")
        assert writer.flush() is False
        writer.feed(b"c\n")
        assert writer.flush() is False
    assert len(said) == 1 and "cannot be kept in storage" in said[0]
    assert writer.end()  # storage is back: nothing was lost
    assert read_all(storage, JOB) == "aaaaaaa\nbbbbbbb\nccc\n"


def test_what_a_long_refusal_drops_is_bounded_and_said(tmp_path: Path) -> None:
    storage = _store(tmp_path)
    writer = ChunkWriter(storage, JOB, chunk_bytes=4, warn=lambda _: None)
    writer.begin()
    with read_only(tmp_path / "store"):
        writer.feed(b"0123" * 20)  # 20 sealed chunks, more than are kept in memory
        writer.flush()
    writer.feed(b"e\n")
    assert writer.end()
    assert writer.dropped == 4 * (20 - 8)
    text = read_all(storage, JOB)
    assert text.startswith(f"[kinetic: {writer.dropped} bytes of this log were not kept")
    assert text.endswith("0123" * 8 + "e\n")
    assert _read_by_cursor(storage, 4).decode() == text


def _run(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    """``body`` in a process whose stdout is a pipe (as a container's), capture started."""
    script = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        from kinetic_core.runtime import log_capture
        from kinetic_core.storage.local import LocalStorage
        STORE = LocalStorage({f"file://{tmp_path / 'store'}"!r})
        log_capture.start(STORE, {JOB!r})
        """
    ) + textwrap.dedent(body)
    (tmp_path / "store").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**_env(), **env},
        timeout=60,
        check=False,
    )


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KINETIC_")}


def test_every_writer_of_fd_1_and_2_reaches_the_pod_log_and_storage(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        """
        import ctypes
        print("from print")
        sys.stderr.write("from sys.stderr\\n")
        os.write(2, b"from fd 2\\n")
        subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
        ctypes.CDLL(None).write(1, b"from C\\n", 7)
        """,
    )
    assert done.returncode == 0
    lines = ["from print", "from sys.stderr", "from fd 2", "from a child", "from C"]
    assert done.stdout.decode().splitlines() == lines  # the pod's own log: every byte
    storage = _store(tmp_path)
    assert read_all(storage, JOB).splitlines() == lines
    assert "ended_ns" in (read_meta(storage, JOB) or {})


def test_a_process_that_ends_in_os_exit_keeps_its_last_line(tmp_path: Path) -> None:
    done = _run(tmp_path, 'print("last words", flush=True)\nos._exit(3)\n')
    assert done.returncode == 3
    assert done.stdout == b"last words\n"
    assert read_all(_store(tmp_path), JOB) == "last words\n"


def test_sigterm_before_any_handler_flushes_then_dies_by_sigterm(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        """
        for i in range(5):
            print(f"line {i}", flush=True)
        os.kill(os.getpid(), 15)
        time.sleep(30)
        print("never")
        """,
        KINETIC_LOG_FLUSH_SECONDS="3600",  # only the end can have written the lines
    )
    assert done.returncode == -signal.SIGTERM
    assert read_all(_store(tmp_path), JOB) == "".join(f"line {i}\n" for i in range(5))


def test_sync_puts_everything_printed_so_far_in_storage(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        """
        import json
        from kinetic_core.records.log_chunks import read_all
        print("before the end is decided", flush=True)
        log_capture.sync()
        os.write(2, json.dumps(read_all(STORE, "job-logs")).encode() + b"\\n")
        """,
        KINETIC_LOG_FLUSH_SECONDS="3600",
    )
    assert done.returncode == 0
    assert json.loads(done.stdout.decode().splitlines()[-1]) == "before the end is decided\n"


def test_no_tee_where_stdout_is_a_file(tmp_path: Path) -> None:
    out = tmp_path / "out.log"
    with out.open("wb") as fh:
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from kinetic_core import log_capture; print(log_capture.wanted())",
            ],
            stdout=fh,
            env=_env(),
            check=True,
        )
    assert out.read_text() == "False\n"


def test_a_sigterm_after_the_end_keeps_the_runners_exit_code(tmp_path: Path) -> None:
    """A pod deleted right after the job's end was decided (recovery deletes the old
    attempt's pods) must not turn the runner's exit code into 143."""
    done = _run(
        tmp_path,
        """
        from kinetic_core.runtime import notice
        notice.install()
        print("done", flush=True)
        log_capture.stop()
        os.kill(os.getpid(), 15)
        sys.exit(75)
        """,
    )
    assert done.returncode == 75
    assert read_all(_store(tmp_path), JOB) == "done\n"


def test_the_pump_is_forked_and_a_sync_after_nothing_printed_does_not_wait_for_it(
    tmp_path: Path,
) -> None:
    """Before: the pump was a fresh interpreter (``python -m ...log_capture``) and every
    job's end waited in ``sync()`` for it to start and answer, printed or not (~35 ms)."""
    marks = tmp_path / "marks.json"
    done = _run(
        tmp_path,
        f"""
        import json, signal
        capture = log_capture._active[0]
        with open(f"/proc/{{capture.pump}}/cmdline") as a, open("/proc/self/cmdline") as b:
            forked = a.read() == b.read()  # no exec: the runner's own image
        os.kill(capture.pump, signal.SIGSTOP)  # a sync that needs the pump waits 10 s, False
        quiet = capture.sync()
        os.kill(capture.pump, signal.SIGCONT)
        print("something", flush=True)
        printed = capture.sync()
        with open({str(marks)!r}, "w") as fh:
            json.dump([forked, quiet, printed], fh)
        """,
        KINETIC_LOG_FLUSH_SECONDS="3600",
    )
    assert done.returncode == 0, done.stdout
    assert json.loads(marks.read_text()) == [True, True, True]
    assert done.stdout == b"something\n"
    storage = _store(tmp_path)
    assert read_all(storage, JOB) == "something\n"
    assert "ended_ns" in (read_meta(storage, JOB) or {})
