"""``@task.kinetic(...)``: the decorated function's body runs remotely as a kinetic job."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, task_decorator_factory

import kinetic_core as kc
from kinetic_airflow.operators.job import KineticOperator

TARGET_FIELDS = frozenset(f.name for f in dataclasses.fields(kc.Target)) - {"signing_key"}


class _KineticDecoratedOperator(DecoratedOperator, KineticOperator):  # type: ignore[misc]
    """Taskflow wrapper around KineticOperator; arguments may be upstream XComs."""

    template_fields: Sequence[str] = ("op_args", "op_kwargs", "target", "job_tags")
    template_fields_renderers = {"op_args": "py", "op_kwargs": "py", "target": "json"}
    custom_operator_name = "@task.kinetic"

    def __init__(
        self, *, python_callable: Callable[..., Any], op_args: Any, op_kwargs: Any, **kwargs: Any
    ) -> None:
        super().__init__(
            kwargs_to_upstream={
                "python_callable": python_callable,
                "op_args": op_args,
                "op_kwargs": op_kwargs,
            },
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            **kwargs,
        )


def kinetic_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Decorator: ``@task.kinetic`` or ``@task.kinetic(accelerator="gpu-l4", spot=True, retries=2)``.

    Keyword arguments that are ``kinetic_core.Target`` fields (accelerator, spot, image,
    life_span, ...) become target overrides; the rest are KineticOperator / BaseOperator arguments.
    """
    target = kc.Target.coerce(kwargs.pop("target", None)).to_dict(include_secrets=True)
    for name in list(kwargs):
        if name in TARGET_FIELDS:
            target[name] = kwargs.pop(name)
    if target:
        # A Target, not a dict: mapped tasks keep their arguments in the serialized DAG,
        # and a Target is serialized without its signing key.
        kwargs["target"] = kc.Target.from_dict(target)
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_KineticDecoratedOperator,
        **kwargs,
    )
