"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any

#: The provider's page in the project's documentation site (mkdocs, ``docs/airflow.md``),
#: published with GitHub Pages of the kinetic-workflows organization, as the Prefect block's.
DOCS_URL = "https://kinetic-workflows.github.io/kinetic-workflows/airflow/"
DESCRIPTION = (
    "Run Python functions as detached, reattachable jobs on local processes, Kubernetes or "
    "GKE (TPUs, GPUs, spot): a deferrable KineticOperator, @task.kinetic, a batch operator, "
    "a job sensor and the kinetic connection type. A retry reattaches to its running job "
    "instead of starting a duplicate; the worker slot is free while the job runs."
)

_TEXT_FIELDS: dict[str, tuple[str, str]] = {
    "storage": ("Storage URI", "file:///abs/path, file://~/dir or gs://bucket/prefix"),
    "accelerator": ("Accelerator", "e.g. tpu-v5e-8, gpu-l4 (empty: CPU only)"),
    "namespace": ("Kubernetes namespace", "default"),
    "kube_context": ("Kube context", "context name in the kubeconfig"),
    "project": ("GCP project", "my-gcp-project (links to the Cloud Console)"),
    "image": ("Container image", "us-docker.pkg.dev/proj/repo/image:tag"),
}


def _field(label: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": schema}


def conn_fields() -> dict[str, Any]:
    """The connection form's fields (Airflow 3.2+ reads them from here; earlier versions
    show the Extra JSON only). No field has a default: an untouched field stays unset."""
    import kinetic_core as kc

    fields: dict[str, Any] = {
        "backend": _field(
            "Backend",
            "where jobs run (empty: KINETIC_BACKEND, else local)",
            {"type": ["string", "null"], "enum": [None, *kc.BACKENDS]},
        )
    }
    for name, (label, hint) in _TEXT_FIELDS.items():
        fields[name] = _field(label, hint, {"type": ["string", "null"]})
    fields["kubeconfig"] = _field(
        "Kubeconfig",
        "path of a kubeconfig file, or its content (kept out of handles, XCom and logs); "
        "empty: $KUBECONFIG",
        {"type": ["string", "null"], "format": "password"},
    )
    fields["spot"] = _field(
        "Spot", "run on spot / preemptible capacity", {"type": ["boolean", "null"]}
    )
    fields["life_span"] = _field(
        "Life span (seconds)",
        "a job running longer is stopped (empty: no limit)",
        {"type": ["number", "null"], "exclusiveMinimum": 0},
    )
    fields["in_cluster"] = _field(
        "In cluster",
        "use the pod's service account instead of a kubeconfig",
        {"type": ["boolean", "null"]},
    )
    return fields


def get_provider_info() -> dict[str, Any]:
    """Describe the kinetic provider to Airflow: hooks, triggers, links, decorators, connection type."""
    return {
        "package-name": "kinetic-workflows",
        "name": "Kinetic",
        "description": DESCRIPTION,
        "documentation-url": DOCS_URL,
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "Kinetic",
                "external-doc-url": DOCS_URL,
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
        "extra-links": [
            "kinetic_airflow.links.KineticJobLink",
            "kinetic_airflow.links.KineticJobLogsLink",
            "kinetic_airflow.links.KineticJobFilesLink",
        ],
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
                "conn-fields": conn_fields(),
            }
        ],
    }
