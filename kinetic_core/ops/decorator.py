"""``@run``: a function that runs as a detached job when called (``RemoteFunction``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

from kinetic_core.batch import BatchHandle, submit_map
from kinetic_core.config.target import Target, validate_tags
from kinetic_core.errors import SubmissionError
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.jobs.submission import submit

__all__ = ["RemoteFunction", "run"]

P = ParamSpec("P")
R = TypeVar("R")
_JOB_OPTIONS = ("idempotency_key", "name", "tags", "volumes", "owner", "description", "keep")


class RemoteFunction(Generic[P, R]):
    """A function that runs as a detached job. Calling it waits for the result."""

    def __init__(self, fn: Callable[P, R], *, target: Target, options: dict[str, Any]) -> None:
        if not callable(fn):
            raise SubmissionError(f"@run needs a callable, got {type(fn).__name__}.")
        self.fn = fn
        self.target = target
        self.job_options = options
        functools.update_wrapper(self, fn)

    def options(self, **overrides: Any) -> RemoteFunction[P, R]:
        """A copy with other job options (idempotency_key, name, tags, owner, description,
        keep) or Target fields."""
        job = {k: overrides.pop(k) for k in _JOB_OPTIONS if k in overrides}
        if "tags" in job:  # tags add up; other options replace
            job["tags"] = {**self.job_options.get("tags", {}), **validate_tags(job["tags"])}
        target = self.target.merge(Target.coerce(overrides.pop("target", None)))
        target = target.merge(Target.from_dict(overrides))
        return RemoteFunction(self.fn, target=target, options={**self.job_options, **job})

    def run_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        return submit(self.fn, args, kwargs, target=self.target, **self.job_options)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run_async(*args, **kwargs).result()

    def run_async_map(self, inputs: Any, **options: Any) -> BatchHandle:
        """Fan out over ``inputs`` as one batch (see ``kinetic_core.submit_map``)."""
        options.setdefault("target", self.target)
        for key in ("name", "tags"):
            if key in self.job_options:
                options.setdefault(key, self.job_options[key])
        return submit_map(self.fn, inputs, **options)


def run(
    fn: Callable[P, R] | None = None,
    *,
    target: Target | dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Decorator: ``@run`` or ``@run(tags=..., life_span=..., backend=...)``.

    Keyword arguments are job options (idempotency_key, name, tags, volumes, owner,
    description, keep: ``kinetic gc`` never removes its jobs) or Target fields, among them
    ``output_dir`` (where the job's outputs go) and ``debug`` (keep a failed job's processes
    or pod for inspection).
    """
    job = {k: options.pop(k) for k in _JOB_OPTIONS if k in options}
    resolved = Target.coerce(target).merge(Target.from_dict(options))

    def wrap(f: Callable[P, R]) -> RemoteFunction[P, R]:
        return RemoteFunction(f, target=resolved, options=job)

    return wrap(fn) if fn is not None else wrap
