"""The CustomResourceDefinitions of JobSet and Kueue, served by the test API server.

Why: a 1.20 control plane cannot run the JobSet and Kueue controllers, but every manifest the
Kubernetes backend sends must still be validated by the API server's structural schema, as on
a cluster with both installed. The stand-in controllers (``jobset_controller.py``,
``kueue_controller.py``) act on these objects.

Why written here instead of copied: the upstream CRD YAMLs may not be committed to this
repository (the workplace keeps content brought from public repositories out of commits), so
the schemas are written here from the upstream Go types, field for field for what they cover:

* JobSet ``jobset.x-k8s.io/v1alpha2`` (kubernetes-sigs/jobset v0.12.0,
  ``api/jobset/v1alpha2/jobset_types.go``; upstream CRD
  ``config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml``): every field of
  ``JobSetSpec`` and ``JobSetStatus`` except ``volumeClaimPolicies`` (an unknown field is
  pruned, as the API server prunes any field a structural schema does not name).
* Kueue ``kueue.x-k8s.io/v1beta1`` (kubernetes-sigs/kueue v0.19.2, ``apis/kueue/v1beta1/
  {resourceflavor,clusterqueue,localqueue,workload,workloadpriorityclass}_types.go``; upstream
  CRDs ``config/components/crd/bases/kueue.x-k8s.io_*.yaml``): ResourceFlavor, ClusterQueue,
  LocalQueue, Workload and WorkloadPriorityClass with the fields the stand-in uses and the
  common ones around them; v1beta2 (also served by v0.19) is not served here.

The embedded ``batch/v1`` JobTemplateSpec (JobSet) and ``core/v1`` PodTemplateSpec (Workload
pod sets) are not written out: they are converted at install time from the API server's own
OpenAPI definitions of those types, exactly as controller-gen generates them from the same Go
types upstream (for the 1.20 fields). Upstream's ``x-kubernetes-validations`` (CEL) rules are
not reproduced: a 1.20 API server does not evaluate them (CEL arrived in 1.25).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Schema = dict[str, Any]

JOBSET_GROUP = "jobset.x-k8s.io"
KUEUE_GROUP = "kueue.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
KUEUE_VERSION = "v1beta1"

_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_TIME = (
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
)
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_KEEP = ("type", "format", "enum", "required")


# ---- small schema builders ------------------------------------------------------------------


def s(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def i(fmt: str = "int32", **extra: Any) -> Schema:
    return {"type": "integer", "format": fmt, **extra}


def b() -> Schema:
    return {"type": "boolean"}


def obj(required: tuple[str, ...] = (), **props: Schema) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


def arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def smap(value: Schema | None = None) -> Schema:
    return {"type": "object", "additionalProperties": value or s()}


def quantity() -> Schema:
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }


def embedded_meta() -> Schema:
    """What controller-gen writes for an embedded ObjectMeta (generateEmbeddedObjectMeta)."""
    return obj(
        annotations=smap(),
        finalizers=arr(s()),
        labels=smap(),
        name=s(),
        namespace=s(),
    )


def condition() -> Schema:
    """metav1.Condition, as in every upstream CRD's status.conditions."""
    return obj(
        ("lastTransitionTime", "message", "reason", "status", "type"),
        lastTransitionTime=s(format="date-time"),
        message=s(maxLength=32768),
        observedGeneration=i("int64", minimum=0),
        reason=s(maxLength=1024),
        status=s(enum=["True", "False", "Unknown"]),
        type=s(maxLength=316),
    )


# ---- OpenAPI v2 definitions -> structural schema ------------------------------------------


def structural(definitions: dict[str, Any], name: str) -> Schema:
    """Inline one OpenAPI v2 definition (as the API server publishes it) into a structural
    schema: every node typed, no $ref, int-or-string and quantities marked, descriptions and
    strategic-merge extensions dropped (the API server does not need them to validate)."""
    return _convert(definitions, definitions[name], (name,))


def _convert(defs: dict[str, Any], node: dict[str, Any], seen: tuple[str, ...]) -> Schema:
    ref = node.get("$ref")
    if ref:
        target = ref.rsplit("/", 1)[-1]
        if target in (_QUANTITY, _INT_OR_STRING):
            return quantity()
        if target in _TIME:
            return s(format="date-time")
        if target == _OBJECT_META:
            return embedded_meta()
        if target in seen:  # a recursive type: none in pod templates, kept safe anyway
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return _convert(defs, defs[target], (*seen, target))
    out: Schema = {k: node[k] for k in _KEEP if k in node}
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {k: _convert(defs, v, seen) for k, v in node["properties"].items()}
    elif "additionalProperties" in node:
        out["additionalProperties"] = _convert(defs, node["additionalProperties"], seen)
    if "items" in node:
        out["items"] = _convert(defs, node["items"], seen)
    if "type" not in out:
        out["type"] = "object"
        out.setdefault("x-kubernetes-preserve-unknown-fields", True)
    return out


# ---- JobSet -------------------------------------------------------------------------------


def jobset_schema(job_template: Schema) -> Schema:
    """api/jobset/v1alpha2/jobset_types.go (v0.12.0)."""
    failure_rule = obj(
        ("action", "name"),
        name=s(),
        action=s(
            enum=[
                "FailJobSet",
                "RestartJobSet",
                "RestartJobSetAndIgnoreMaxRestarts",
                "RestartJob",
                "RestartJobAndIgnoreMaxRestarts",
            ]
        ),
        onJobFailureReasons=arr(s()),
        onJobFailureMessagePatterns=arr(s()),
        targetReplicatedJobs=arr(s()),
    )
    replicated_job = obj(
        ("name", "template"),
        name=s(),
        groupName=s(),
        template=job_template,
        replicas=i(),
        dependsOn=arr(obj(("name", "status"), name=s(), status=s(enum=["Ready", "Complete"]))),
    )
    spec = obj(
        replicatedJobs=arr(replicated_job),
        network=obj(enableDNSHostnames=b(), subdomain=s(), publishNotReadyAddresses=b()),
        successPolicy=obj(
            ("operator",),
            operator=s(enum=["All", "Any"]),
            targetReplicatedJobs=arr(s()),
        ),
        failurePolicy=obj(
            maxRestarts=i(),
            restartStrategy=s(enum=["Recreate", "BlockingRecreate", "InPlaceRestart"]),
            rules=arr(failure_rule),
        ),
        startupPolicy=obj(
            ("startupPolicyOrder",), startupPolicyOrder=s(enum=["AnyOrder", "InOrder"])
        ),
        suspend=b(),
        coordinator=obj(
            ("replicatedJob",), replicatedJob=s(), jobIndex=i("int64"), podIndex=i("int64")
        ),
        managedBy=s(),
        ttlSecondsAfterFinished=i(minimum=0),
    )
    status = obj(
        conditions=arr(condition()),
        restarts=i(),
        restartsCountTowardsMax=i(),
        terminalState=s(),
        replicatedJobsStatus=arr(
            obj(
                ("active", "failed", "name", "ready", "succeeded", "suspended"),
                name=s(),
                ready=i(),
                succeeded=i(),
                failed=i(),
                active=i(),
                suspended=i(),
            )
        ),
    )
    return _root(spec, status)


def _root(spec: Schema, status: Schema) -> Schema:
    return obj(apiVersion=s(), kind=s(), metadata={"type": "object"}, spec=spec, status=status)


# ---- Kueue --------------------------------------------------------------------------------


def resource_flavor_schema() -> Schema:
    taint = obj(("effect", "key"), key=s(), value=s(), effect=s(), timeAdded=s(format="date-time"))
    toleration = obj(key=s(), operator=s(), value=s(), effect=s(), tolerationSeconds=i("int64"))
    return _root(
        obj(
            nodeLabels=smap(),
            nodeTaints=arr(taint),
            tolerations=arr(toleration),
            topologyName=s(),
        ),
        {"type": "object"},
    )


def _usage() -> Schema:
    return arr(
        obj(
            ("name", "resources"),
            name=s(),
            resources=arr(obj(("name",), name=s(), total=quantity(), borrowed=quantity())),
        )
    )


def cluster_queue_schema() -> Schema:
    resource = obj(
        ("name", "nominalQuota"),
        name=s(),
        nominalQuota=quantity(),
        borrowingLimit=quantity(),
        lendingLimit=quantity(),
    )
    flavor = obj(("name", "resources"), name=s(), resources=arr(resource))
    group = obj(("coveredResources", "flavors"), coveredResources=arr(s()), flavors=arr(flavor))
    selector = obj(
        matchLabels=smap(),
        matchExpressions=arr(obj(("key", "operator"), key=s(), operator=s(), values=arr(s()))),
    )
    return _root(
        obj(
            resourceGroups=arr(group),
            cohort=s(),
            queueingStrategy=s(enum=["StrictFIFO", "BestEffortFIFO"]),
            namespaceSelector=selector,
            stopPolicy=s(enum=["None", "Hold", "HoldAndDrain"]),
        ),
        obj(
            conditions=arr(condition()),
            flavorsReservation=_usage(),
            flavorsUsage=_usage(),
            pendingWorkloads=i(),
            reservingWorkloads=i(),
            admittedWorkloads=i(),
        ),
    )


def local_queue_schema() -> Schema:
    return _root(
        obj(clusterQueue=s(), stopPolicy=s(enum=["None", "Hold", "HoldAndDrain"])),
        obj(
            conditions=arr(condition()),
            pendingWorkloads=i(),
            reservingWorkloads=i(),
            admittedWorkloads=i(),
        ),
    )


def workload_schema(pod_template: Schema) -> Schema:
    """apis/kueue/v1beta1/workload_types.go (v0.19.2)."""
    pod_set = obj(
        ("count", "name", "template"),
        name=s(),
        count=i(minimum=0),
        minCount=i(),
        template=pod_template,
    )
    assignment = obj(
        ("name",),
        name=s(),
        flavors=smap(),
        resourceUsage=smap(quantity()),
        count=i(),
    )
    return _root(
        obj(
            ("podSets",),
            podSets=arr(pod_set),
            queueName=s(),
            priorityClassName=s(),
            priority=i(),
            priorityClassSource=s(
                enum=["kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass", ""]
            ),
            active=b(),
            maximumExecutionTimeSeconds=i(minimum=1),
        ),
        obj(
            conditions=arr(condition()),
            admission=obj(
                ("clusterQueue", "podSetAssignments"),
                clusterQueue=s(),
                podSetAssignments=arr(assignment),
            ),
            requeueState=obj(count=i(), requeueAt=s(format="date-time")),
            resourceRequests=arr(obj(("name",), name=s(), resources=smap(quantity()))),
        ),
    )


def workload_priority_class_schema() -> Schema:
    return obj(
        ("value",),
        apiVersion=s(),
        kind=s(),
        metadata={"type": "object"},
        value=i(),
        description=s(),
    )


# ---- the CRD objects ----------------------------------------------------------------------


def crd(
    group: str,
    version: str,
    kind: str,
    plural: str,
    schema: Schema,
    scope: str = "Namespaced",
    short_names: tuple[str, ...] = (),
) -> dict[str, Any]:
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}} if "status" in schema["properties"] else {},
                }
            ],
        },
    }


def all_crds(definitions: dict[str, Any]) -> list[dict[str, Any]]:
    """Every CRD, with the embedded Job/Pod templates taken from the server's definitions."""
    # batch/v1 JobTemplateSpec exists from 1.21 on; on 1.20 it is metadata + batch/v1 JobSpec
    job_template = obj(
        metadata=embedded_meta(), spec=structural(definitions, "io.k8s.api.batch.v1.JobSpec")
    )
    pod_template = structural(definitions, "io.k8s.api.core.v1.PodTemplateSpec")
    k = KUEUE_GROUP, KUEUE_VERSION
    return [
        crd(JOBSET_GROUP, JOBSET_VERSION, "JobSet", "jobsets", jobset_schema(job_template)),
        crd(
            *k,
            "ResourceFlavor",
            "resourceflavors",
            resource_flavor_schema(),
            "Cluster",
            ("flavor", "flavors", "rf"),
        ),
        crd(*k, "ClusterQueue", "clusterqueues", cluster_queue_schema(), "Cluster", ("cq",)),
        crd(
            *k,
            "LocalQueue",
            "localqueues",
            local_queue_schema(),
            short_names=("queue", "queues", "lq"),
        ),
        crd(*k, "Workload", "workloads", workload_schema(pod_template), short_names=("wl",)),
        crd(
            *k,
            "WorkloadPriorityClass",
            "workloadpriorityclasses",
            workload_priority_class_schema(),
            "Cluster",
        ),
    ]


def install(api: Callable[..., Any], timeout: float = 60) -> list[str]:
    """Create every CRD through ``api(method, path, body)`` and wait until each is
    Established (served); return their names."""
    definitions = api("GET", "/openapi/v2")["definitions"]
    names = []
    for item in all_crds(definitions):
        api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", item)
        names.append(item["metadata"]["name"])
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        got = api("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{pending[0]}")
        # A CRD just created may answer ``conditions: null`` before its controller looks.
        conditions = (got.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"CRD {pending[0]} not Established after {timeout:.0f}s: {conditions}"
            )
        time.sleep(0.2)
    return names
