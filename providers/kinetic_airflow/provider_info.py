"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any

_FIELDS: dict[str, tuple[str, str]] = {
    "backend": ("Backend", "local, kubernetes or gke (empty: KINETIC_BACKEND or local)"),
    "storage": ("Storage URI", "file:///abs/path, file://~/dir or gs://bucket/prefix"),
    "namespace": ("Kubernetes namespace", "default"),
    "kube_context": ("Kube context", "context name in kubeconfig"),
    "project": ("GCP project", "my-gcp-project"),
    "image": ("Container image", "us-docker.pkg.dev/proj/repo/image:tag"),
}


def get_provider_info() -> dict[str, Any]:
    """Describe the kinetic provider to Airflow: hooks, triggers, links, decorators, connection type."""
    conn_fields: dict[str, Any] = {
        name: {"label": label, "description": hint, "schema": {"type": ["string", "null"]}}
        for name, (label, hint) in _FIELDS.items()
    }
    conn_fields["in_cluster"] = {
        "label": "In cluster",
        "description": "Use the pod's service account instead of a kubeconfig",
        "schema": {"type": ["boolean", "null"]},
    }
    return {
        "package-name": "kinetic-workflows",
        "name": "Kinetic",
        "description": "Detached, reattachable accelerator jobs (kinetic-workflows) for Airflow 3.",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "Kinetic",
                "external-doc-url": "https://github.com/kinetic-workflows",
                "tags": ["software"],
            },
        ],
        "operators": [
            {
                "integration-name": "Kinetic",
                "python-modules": [
                    "kinetic_airflow.operators.job",
                    "kinetic_airflow.operators.batch",
                ],
            },
        ],
        "sensors": [
            {"integration-name": "Kinetic", "python-modules": ["kinetic_airflow.sensors"]},
        ],
        "hooks": [
            {"integration-name": "Kinetic", "python-modules": ["kinetic_airflow.hooks"]},
        ],
        "triggers": [
            {"integration-name": "Kinetic", "python-modules": ["kinetic_airflow.triggers"]},
        ],
        "extra-links": ["kinetic_airflow.links.KineticJobLink"],
        "task-decorators": [
            {"name": "kinetic", "class-name": "kinetic_airflow.decorators.kinetic_task"},
        ],
        "connection-types": [
            {
                "connection-type": "kinetic",
                "hook-class-name": "kinetic_airflow.hooks.KineticHook",
                "hook-name": "Kinetic",
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "port", "login"],
                    "relabeling": {"password": "Signing key (HMAC)"},
                    "placeholders": {
                        "password": "optional: signs and verifies job envelopes",
                        "extra": '{"accelerator": "tpu-v5e-8", "spot": true, "life_span": 86400}',
                    },
                },
                "conn-fields": conn_fields,
            }
        ],
    }
