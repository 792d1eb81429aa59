"""Target resolution: explicit argument > KINETIC_* environment > defaults."""

from __future__ import annotations

import json
import os

import pytest

import kinetic_core as kc


def test_defaults() -> None:
    t = kc.Target().resolve(environ={})
    assert t.backend == "local"
    assert t.storage == "file://" + os.path.expanduser("~/.kinetic")


def test_env_then_argument_precedence() -> None:
    env = {
        "KINETIC_BACKEND": "kubernetes",
        "KINETIC_STORAGE": "gs://bucket/pre/",
        "KINETIC_SPOT": "true",
        "KINETIC_LIFE_SPAN": "3600",
        "KINETIC_ENV": "A,B",
        "KINETIC_NODE_SELECTOR": '{"pool": "tpu"}',
    }
    t = kc.Target().resolve(environ=env)
    assert (t.backend, t.storage, t.spot, t.life_span, t.env) == (
        "kubernetes",
        "gs://bucket/pre",
        True,
        3600.0,
        ["A", "B"],
    )
    assert t.node_selector == {"pool": "tpu"}
    t2 = kc.Target(backend="local", life_span=60).resolve(environ=env)
    assert t2.backend == "local" and t2.life_span == 60 and t2.storage == "gs://bucket/pre"


def test_json_round_trip_without_secrets() -> None:
    t = kc.Target(
        backend="gke",
        accelerator="tpu-v5e-8",
        spot=True,
        signing_key="hunter2",
        tolerations=[{"key": "a", "operator": "Exists"}],
    )
    text = t.to_json()
    assert "hunter2" not in text and "hunter2" not in repr(t)
    back = kc.Target.from_json(text)
    assert back == kc.Target(
        backend="gke",
        accelerator="tpu-v5e-8",
        spot=True,
        tolerations=[{"key": "a", "operator": "Exists"}],
    )
    assert json.loads(text)["accelerator"] == "tpu-v5e-8"


def test_merge_overrides_only_what_is_set() -> None:
    base = kc.Target(backend="gke", namespace="ml", spot=False)
    merged = base.merge({"spot": True, "accelerator": "gpu-l4"})
    assert (merged.backend, merged.namespace, merged.spot, merged.accelerator) == (
        "gke",
        "ml",
        True,
        "gpu-l4",
    )


def test_file_uri_expands_home() -> None:
    t = kc.Target(storage="file://~/runs").resolve(environ={})
    assert t.storage == "file://" + os.path.expanduser("~/runs")


@pytest.mark.parametrize("value", [True, "3", None])
def test_life_span_type_checked(value: object) -> None:
    if value is None:
        kc.Target(life_span=None).validate()
        return
    with pytest.raises(kc.ConfigError):
        kc.Target(life_span=value).validate()  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_seconds_that_are_not_finite_are_refused(value: float) -> None:
    """NaN passed ``value <= 0`` (every comparison with NaN is False), and an infinite
    life_span crashed the Kubernetes manifest later (``math.ceil(inf)``): both refused
    up front, naming the option."""
    with pytest.raises(kc.ConfigError, match="life_span must be a positive number"):
        kc.Target(life_span=value).resolve(environ={})
    with pytest.raises(kc.ConfigError, match="poll_interval"):
        kc.positive_seconds(value, "poll_interval")
