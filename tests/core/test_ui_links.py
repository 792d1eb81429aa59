"""KINETIC_UI_URL: a local job's web page is the dashboard's job page (`kinetic ui`)."""

from __future__ import annotations

import pytest

import kinetic_core as kc


def handle(backend: str = "local") -> kc.JobHandle:
    return kc.JobHandle.from_dict(
        {"job_id": "k0123abcd-2", "storage": "file:///tmp/kinetic", "target": {"backend": backend}}
    )


def test_local_job_links_the_dashboard_job_page_when_its_url_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KINETIC_UI_URL", "http://127.0.0.1:8265/")
    assert kc.job_links(handle()) == {"job": "http://127.0.0.1:8265/jobs/k0123abcd-2"}
    monkeypatch.setenv("KINETIC_UI_URL", "https://airflow.example.com/kinetic")
    assert kc.job_links(handle())["job"] == "https://airflow.example.com/kinetic/jobs/k0123abcd-2"


def test_without_a_dashboard_url_a_local_job_has_no_link(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KINETIC_UI_URL", raising=False)
    assert kc.job_links(handle()) == {}
    monkeypatch.setenv("KINETIC_UI_URL", "")
    assert kc.job_links(handle()) == {}


def test_a_dashboard_url_that_is_not_http_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for bad in ("127.0.0.1:8265", "javascript:alert(1)", "file:///etc"):
        monkeypatch.setenv("KINETIC_UI_URL", bad)
        with pytest.raises(kc.ConfigError, match="KINETIC_UI_URL"):
            kc.job_links(handle())


def test_a_kubernetes_job_keeps_its_console_links(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_UI_URL", "http://127.0.0.1:8265")
    assert kc.job_links(handle("kubernetes")) == {}  # no GCP project: no console, no dashboard
