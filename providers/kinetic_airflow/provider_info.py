"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetic_core import TargetOption

#: The provider's page in the project's documentation site (mkdocs, ``docs/airflow.md``),
#: published with GitHub Pages of the kinetic-workflows organization, as the Prefect block's.
DOCS_URL = "https://kinetic-workflows.github.io/kinetic-workflows/airflow/"
DESCRIPTION = (
    "Run Python functions as detached, reattachable jobs on local processes, Kubernetes or "
    "GKE (TPUs, GPUs, spot): a deferrable KineticOperator, @task.kinetic, a batch operator, "
    "a job sensor and the kinetic connection type. A retry reattaches to its running job "
    "instead of starting a duplicate; the worker slot is free while the job runs."
)

#: Target options that are not a field of the connection form, and where each goes instead.
#: Every other option is a form field (``conn_fields``), saved in the connection's extra.
HANDLED_APART: dict[str, str] = {"signing_key": "the connection's password"}


def _field(option: TargetOption) -> dict[str, Any]:
    """One form field: the option's JSON schema (Airflow's React form picks its widget:
    a switch, a number, a list, a JSON editor), its help and example. A secret option
    (the kubeconfig) is a password field, masked in the UI and the API."""
    import kinetic_core as kc

    schema = option.json_schema()
    if option.name == "backend":
        schema["enum"] = [None, *kc.BACKENDS]
    example = option.example if isinstance(option.example, str) else json.dumps(option.example)
    return {
        "label": option.name.replace("_", " ").capitalize(),
        "description": f"{option.help} Example: {example}",
        "schema": schema,
    }


def conn_fields() -> dict[str, Any]:
    """The connection form's fields, one per ``kinetic_core.target_options()`` option not
    handled apart (Airflow 3.2+ reads them from here; earlier versions show the Extra JSON
    only). No field has a default: an untouched field stays unset."""
    import kinetic_core as kc

    return {o.name: _field(o) for o in kc.target_options() if o.name not in HANDLED_APART}


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
