"""The children's log lines of a batch, prefixed by their input index, bounded per tick.

It reads what the batch's own ticks already know (which child runs, which ended): no
polling of its own. Each child's log is a ``LogStream`` read in bounded chunks; at most
``lines_per_child`` lines per child per read are returned (the latest ones), with a note
saying how many were skipped, so a chatty child cannot flood an orchestrator's task log.
"""

from __future__ import annotations

from typing import Protocol

from kinetic_core.batch.driver import StepResult
from kinetic_core.control.logs import LogStream
from kinetic_core.util.waits import in_thread

DEFAULT_LINES_PER_CHILD = 20


class Watched(Protocol):
    """What the tail needs of a batch handle: what its latest tick saw."""

    @property
    def last_step(self) -> StepResult: ...


class BatchLogTail:
    """New log lines of a batch's children since the last ``read()``."""

    def __init__(self, batch: Watched, lines_per_child: int = DEFAULT_LINES_PER_CHILD) -> None:
        self.batch = batch
        self.lines_per_child = max(0, int(lines_per_child))
        self._streams: dict[str, LogStream] = {}
        self._drained: set[str] = set()

    def read(self) -> list[str]:
        """Lines like ``[child 3] text``, for children the latest tick saw."""
        step = self.batch.last_step
        out: list[str] = []
        if self.lines_per_child == 0:
            return out
        for index, job in sorted(step.jobs.items()):
            if job.job_id in self._drained:
                continue
            stream = self._streams.setdefault(job.job_id, LogStream(job, best_effort=True))
            state = step.states.get(index)
            if state is not None and state.terminal:
                lines = stream.finish(state)
                self._drained.add(job.job_id)
                del self._streams[job.job_id]
            else:
                lines = stream.lines()
            if len(lines) > self.lines_per_child:
                skipped = len(lines) - self.lines_per_child
                out.append(f"[child {index}] ... {skipped} lines skipped")
                lines = lines[-self.lines_per_child :]
            out += [f"[child {index}] {line}" for line in lines]
        return out

    aread = in_thread(read)
