"""Submit and cancel under faults a GKE cluster really has: a Role that a platform team
trimmed, a submitter killed half-way, a Secret someone deleted, an API that loses an
answer, a kubeconfig that carries a private key, a detached batch whose target gives its
kubeconfig as content. Everything runs against the test cluster (real API server, RBAC,
controllers and node agent); identities are real ServiceAccounts with their own tokens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import urllib3
from tenacity import stop_after_attempt, wait_none

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.kubernetes import KubernetesBackend, job_name
from kinetic_core.backends.kubernetes import client as kube_client
from kinetic_core.control.launching import launch_spec
from kinetic_core.control.polling import poll_ticks
from kinetic_core.util.ids import keyed_id

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from cluster.cluster import KINETIC_RULES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KEY = "a-signing-key-for-the-fault-tests"


def _without(verb: str, resource: str) -> list[dict[str, Any]]:
    """KINETIC_RULES less one verb on one resource."""
    rules = []
    for rule in KINETIC_RULES:
        if resource in rule["resources"]:
            rest = [r for r in rule["resources"] if r != resource]
            if rest:
                rules.append({**rule, "resources": rest})
            verbs = [v for v in rule["verbs"] if v != verb]
            rules.append({**rule, "resources": [resource], "verbs": verbs})
        else:
            rules.append(rule)
    return rules


def _admin(kube: kc.Target) -> KubernetesBackend:
    backend = get_backend(kube.resolve())
    assert isinstance(backend, KubernetesBackend)
    return backend


def _objects(admin: KubernetesBackend, job_id: str) -> dict[str, list[str]]:
    """Every Job, Secret and pod that carries the job's label, by kind."""
    found = {}
    for kind in ("jobs", "secrets", "pods"):
        items = admin.client.call(
            "GET", admin.client.ns(kind), query={"labelSelector": f"kinetic/job-id={job_id}"}
        )["items"]
        found[kind] = [
            i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")
        ]
    return {k: v for k, v in found.items() if v}


def _store(kube: kc.Target) -> Path:
    return Path(kube.resolve().storage.removeprefix("file://"))  # type: ignore[union-attr]


def _wait_running(job: kc.JobHandle) -> None:
    for _ in poll_ticks(interval=0.5, timeout=90, describe=lambda: "the job to run"):
        if job.status() is kc.JobStatus.RUNNING:
            return


def _submit_without(
    k8s_cluster: Any, kube: kc.Target, verb: str, resource: str
) -> tuple[kc.PermissionDenied, str]:
    """Submit as service account ``no-{resource}-{verb}``, whose Role lacks that verb; the
    PermissionDenied it raises and the job id the submit would have created."""
    content = k8s_cluster.service_account_kubeconfig(
        f"no-{resource}-{verb}", _without(verb, resource)
    )
    target = replace(kube, kubeconfig=content, signing_key=KEY)
    key = f"rbac-{os.urandom(4).hex()}"
    with pytest.raises(kc.PermissionDenied) as raised:
        kc.submit(k8s_fns.square, (3,), target=target, idempotency_key=key)
    return raised.value, keyed_id(key, 1)


# ---- case 3: a Role without `secrets: create` -----------------------------------------------


def _nothing_left(admin: KubernetesBackend, job_id: str) -> dict[str, list[str]]:
    """What is left of the job once what a failed submit took back is gone."""
    for _ in poll_ticks(interval=0.5, timeout=30, describe=lambda: "the undone objects to go"):
        if not _objects(admin, job_id):
            break
    return _objects(admin, job_id)


def test_submit_without_secrets_create_leaves_nothing_and_names_the_permission(
    k8s_cluster: Any, kube: kc.Target
) -> None:
    error, job_id = _submit_without(k8s_cluster, kube, "create", "secrets")
    # The Job is made first (its Secret is created owned by it): the refused Secret takes
    # the Job back, whose pod never ran the function (it had no signing key).
    assert _nothing_left(_admin(kube), job_id) == {}, "a failed submit left objects behind"
    assert not (_store(kube) / "jobs" / job_id / "handle.json").exists()
    assert isinstance(error, kc.ConfigError)
    assert (error.verb, error.resource, error.namespace) == ("create", "secrets", "default")
    assert error.user == "system:serviceaccount:default:no-secrets-create"
    message = str(error)
    assert "service account no-secrets-create" in message and "Role" in message
    assert "rejected the credentials" not in message


def test_submit_without_jobs_create_takes_its_secret_back(
    k8s_cluster: Any, kube: kc.Target
) -> None:
    error, job_id = _submit_without(k8s_cluster, kube, "create", "jobs")
    assert (error.verb, error.resource) == ("create", "jobs")
    assert _objects(_admin(kube), job_id) == {}


def test_submit_without_secrets_patch_runs_its_secret_owned_from_the_start(
    k8s_cluster: Any, kube: kc.Target
) -> None:
    """The Secret is created owned by its Job (issue 34): no patch is needed, so a Role
    without ``secrets: patch`` submits, and the Secret goes with its Job."""
    content = k8s_cluster.service_account_kubeconfig(
        "no-secrets-patch", _without("patch", "secrets")
    )
    job = kc.submit(k8s_fns.square, (3,), target=replace(kube, kubeconfig=content, signing_key=KEY))
    assert job.result(timeout=120, cleanup=False)["square"] == 9
    admin = _admin(kube)
    secret = admin.client.call("GET", admin.client.ns("secrets", job_name(job.job_id)))
    assert [o["kind"] for o in secret["metadata"]["ownerReferences"]] == ["Job"]


# ---- case 7: cancel without `jobs: delete` --------------------------------------------------


@pytest.mark.timeout(240)
def test_cancel_without_jobs_delete_records_nothing_then_works_once_granted(
    k8s_cluster: Any, kube: kc.Target
) -> None:
    account = f"no-delete-{os.urandom(3).hex()}"
    content = k8s_cluster.service_account_kubeconfig(account, _without("delete", "jobs"))
    target = replace(kube, kubeconfig=content)
    job = kc.submit(k8s_fns.sleep, (300,), target=target)
    _wait_running(job)
    with pytest.raises(kc.ConfigError) as raised:
        job.cancel(wait=0)
    assert job.status() is kc.JobStatus.RUNNING, "a refused cancel was recorded"
    error = raised.value
    assert isinstance(error, kc.PermissionDenied), error
    assert (error.verb, error.resource, error.namespace) == ("delete", "jobs", "default")
    assert _objects(_admin(kube), job.job_id).get("pods"), "the pod was stopped"

    k8s_cluster.grant(account, KINETIC_RULES)
    for _ in poll_ticks(interval=0.5, timeout=30, describe=lambda: "the new Role to apply"):
        try:
            assert job.cancel(wait=60)
            break
        except kc.PermissionDenied:
            continue
    assert job.status() is kc.JobStatus.CANCELLED
    admin = _admin(kube)
    for _ in poll_ticks(interval=0.5, timeout=60, describe=lambda: "the job's objects to go"):
        if not _objects(admin, job.job_id):
            break
    assert _objects(admin, job.job_id) == {}


@pytest.mark.timeout(240)
def test_cancel_deletes_pods_an_orphaning_job_deletion_left(kube: kc.Target) -> None:
    job = kc.submit(k8s_fns.sleep, (300,), target=kube)
    _wait_running(job)
    admin = _admin(kube)
    admin.client.call(
        "DELETE",
        admin.client.ns("jobs", job_name(job.job_id)),
        body={"propagationPolicy": "Orphan"},
    )
    jobs = admin.client.ns("jobs")
    for _ in poll_ticks(interval=0.5, timeout=30, describe=lambda: "the Job to go"):
        listed = admin.client.call(
            "GET", jobs, query={"labelSelector": f"kinetic/job-id={job.job_id}"}
        )["items"]
        if not listed:  # gone, not only terminating (the GC orphans its pods first)
            break
    assert _objects(admin, job.job_id).get("pods"), "the orphaned pod runs on"
    get_backend(kube.resolve()).cancel(job.job_id)
    for _ in poll_ticks(interval=0.5, timeout=60, describe=lambda: "the orphaned pod to go"):
        if "pods" not in _objects(admin, job.job_id):
            break
    assert _objects(admin, job.job_id) == {}


# ---- case 4: a submitter killed between its creates; a Secret deleted -----------------------

KILLED_SUBMITTER = r"""
import json, os, signal, sys
import kinetic_core as kc
import k8s_fns
from kinetic_core.backends.kubernetes import client

original = client.KubeClient.call

def call(self, method, path, **kw):
    answer = original(self, method, path, **kw)
    if method == "POST" and path.endswith("/jobs") and not (kw.get("query") or {}).get("dryRun"):
        os.kill(os.getpid(), signal.SIGKILL)  # right after the Job was created
    return answer

client.KubeClient.call = call
target = kc.Target.from_dict(json.loads(sys.argv[1]))
kc.submit(k8s_fns.square, (6,), target=target, idempotency_key=sys.argv[2])
"""


@pytest.mark.timeout(240)
def test_a_submitter_killed_right_after_the_job_create_leaves_a_job_that_runs(
    k8s_cluster: Any, kube: kc.Target
) -> None:
    key = f"killed-{os.urandom(4).hex()}"
    done = subprocess.run(
        [sys.executable, "-c", KILLED_SUBMITTER, json.dumps(kube.to_dict()), key],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}", "KINETIC_SIGNING_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "jobs" in _objects(_admin(kube), keyed_id(key, 1))
    # A resubmit with the key attaches to the job, which runs (its Secret exists).
    job = kc.submit(
        k8s_fns.square, (6,), target=replace(kube, signing_key=KEY), idempotency_key=key
    )
    assert job.job_id == keyed_id(key, 1) and job.reattached
    state = job.wait(timeout=120)
    assert state.status is kc.JobStatus.SUCCEEDED, state
    assert job.result()["square"] == 36


@pytest.mark.timeout(300)
def test_a_job_whose_secret_was_deleted_ends_with_a_reason_and_a_resubmit_runs(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = kube_client.KubeClient.call

    def delete_secrets(self: Any, method: str, path: str, **kw: Any) -> Any:
        # Someone deletes the Secret before any pod reads it: answered as created, never
        # stored (a DELETE after the create raced the pod, which is created first and under
        # load could read the Secret in between and succeed)
        if method == "POST" and path.endswith("/secrets"):
            return kw["body"]
        return original(self, method, path, **kw)

    monkeypatch.setattr(kube_client.KubeClient, "call", delete_secrets)
    target = replace(kube, signing_key=KEY)
    key = f"secret-gone-{os.urandom(4).hex()}"
    job = kc.submit(k8s_fns.square, (5,), target=target, idempotency_key=key)
    monkeypatch.setattr(kube_client.KubeClient, "call", original)
    state = job.wait(timeout=150)
    assert state.status is kc.JobStatus.FAILED, state
    assert state.reason == "SecretMissing" and "Secret" in (state.message or "")
    again = kc.submit(k8s_fns.square, (5,), target=target, idempotency_key=key)
    assert again.job_id == keyed_id(key, 2), "the resubmit attached to the dead job"
    assert again.result(timeout=120)["square"] == 25


# ---- case 1's Kubernetes side: transient stays transient, a lost answer is found -------------


@pytest.fixture
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    shortened = kube_client.API_RETRY.copy(stop=stop_after_attempt(3), wait=wait_none())
    monkeypatch.setattr(kube_client, "API_RETRY", shortened)


def _spec(kube: kc.Target, job_id: str) -> Any:
    target = replace(kube, signing_key=KEY).resolve()
    return launch_spec(job_id, target.storage or "", target, {})


def test_a_job_create_that_never_arrives_stays_transient_and_leaves_nothing(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch, short_retries: None
) -> None:
    backend = KubernetesBackend(kube.resolve())
    original = backend.client._request

    def refuse_job_posts(method: str, path: str, *args: Any) -> Any:
        if method == "POST" and path.endswith("/jobs"):
            raise urllib3.exceptions.ProtocolError("connection reset by the load balancer")
        return original(method, path, *args)

    monkeypatch.setattr(backend.client, "_request", refuse_job_posts)
    job_id = f"transient-{os.urandom(4).hex()}"
    with pytest.raises(kc.BackendError) as raised:
        backend.launch(_spec(kube, job_id))
    assert not isinstance(raised.value, kc.SubmissionError), raised.value
    assert raised.value.transient
    assert _objects(_admin(kube), job_id) == {}


def test_a_job_create_whose_answer_was_lost_is_found_not_duplicated(
    k8s_cluster: Any, kube: kc.Target, monkeypatch: pytest.MonkeyPatch, short_retries: None
) -> None:
    backend = KubernetesBackend(kube.resolve())
    original = backend.client._request
    lost = []

    def lose_first_answer(method: str, path: str, *args: Any) -> Any:
        answer = original(method, path, *args)
        if method == "POST" and path.endswith("/jobs") and not lost:
            lost.append(answer)
            raise urllib3.exceptions.ProtocolError("answer lost on the way back")
        return answer

    monkeypatch.setattr(backend.client, "_request", lose_first_answer)
    job_id = f"lost-answer-{os.urandom(4).hex()}"
    backend.launch(_spec(kube, job_id))
    assert lost, "the create was not made"
    objects = _objects(_admin(kube), job_id)
    assert objects["jobs"] == [job_name(job_id)] and objects["secrets"] == [job_name(job_id)]
    backend.cancel(job_id)


# ---- case 6: a kubeconfig's private key stays in memory -------------------------------------


def _files_holding(secret: bytes, root: Path) -> list[str]:
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            try:
                if (
                    path.is_file()
                    and path.stat().st_size < 16 << 20
                    and secret in path.read_bytes()
                ):
                    found.append(str(path))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("given_as", ["content", "path"])
def test_a_client_key_in_kubeconfig_content_never_reaches_a_file(
    k8s_cluster: Any, kube: kc.Target, tmp_path: Path, given_as: str
) -> None:
    """Given as content (a connection, a block) or as the path of a kubeconfig file (the
    usual ~/.kube/config): the client key and certificate are read from memory, never
    from a file the client writes."""
    content, key = k8s_cluster.client_cert_kubeconfig()
    if given_as == "path":
        (tmp_path / "kubeconfig").write_text(content)
        target = replace(kube, kubeconfig=str(tmp_path / "kubeconfig"))
    else:
        target = replace(kube, kubeconfig=content)
    backend = KubernetesBackend(target.resolve())
    assert backend.poll(["no-such-job"])["no-such-job"].phase == "not_found"  # a real call
    from kubernetes.config import kube_config

    written = [p for p in kube_config._temp_files.values() if Path(p).exists()]
    assert not [p for p in written if key in Path(p).read_bytes()], written
    assert _files_holding(key, Path(tempfile.gettempdir())) == []
    tls = backend.client.api.configuration
    for path in (tls.key_file, tls.cert_file, tls.ssl_ca_cert):  # what TLS reads: memory
        assert os.readlink(path).startswith("/memfd:"), path
    backend.client.close()


# ---- case 9: a detached batch whose kubeconfig is content, on both spellings ----------------

BATCH_SUBMITTER = r"""
import json, sys
import kinetic_core as kc
import k8s_fns

fields = json.loads(sys.argv[1])
target = kc.Target.from_dict({**fields, "kubeconfig": sys.stdin.read()})
batch = kc.submit_map(k8s_fns.square, [(i,) for i in range(4)], target=target, max_concurrency=2)
print(json.dumps({"group_id": batch.group_id}), flush=True)
"""


@pytest.mark.timeout(400)
@pytest.mark.parametrize("backend", ["kubernetes", "gke"])
def test_a_detached_batch_with_kubeconfig_content_runs_its_driver_in_cluster(
    k8s_cluster: Any, tmp_path: Path, backend: str
) -> None:
    k8s_cluster.grant("default", KINETIC_RULES)  # the driver pod's service account
    content = Path(k8s_cluster.kubeconfig_path).read_text()
    target = kc.Target(
        backend=backend,
        kube_context="kinetic-test",
        kubeconfig=content,
        namespace="default",
        storage=f"file://{tmp_path / 'store'}",
        pickle_by_value=["k8s_fns"],
        poll_interval=0.5,
    )
    fields = {k: v for k, v in target.to_dict().items() if k != "kubeconfig"}
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        [sys.executable, "-c", BATCH_SUBMITTER, json.dumps(fields)],
        input=content,
        cwd=ROOT,
        env={**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    group_id = json.loads(done.stdout.splitlines()[-1])["group_id"]
    batch = kc.attach_batch(group_id, target=target)
    statuses = batch.statuses()
    deadline = time.monotonic() + 200
    while not all(s.terminal for s in statuses) and time.monotonic() < deadline:
        time.sleep(0.5)
        statuses = batch.statuses()
    assert statuses == ["SUCCEEDED"] * 4, statuses
    assert [r["square"] for r in batch.results(cleanup=False, timeout=60)] == [0, 1, 4, 9]


def test_a_detached_batch_whose_driver_gets_no_token_is_refused_up_front(
    kube: kc.Target,
) -> None:
    target = replace(kube, pod_template={"spec": {"automountServiceAccountToken": False}})
    with pytest.raises(kc.ConfigError, match="automountServiceAccountToken"):
        kc.submit_map(k8s_fns.square, [(1,), (2,)], target=target)
    # Refused before anything was written: no manifest, no staged child.
    assert kc.list_batches(target=target) == []
    assert kc.list_jobs(target=target) == []


def test_a_detached_batch_whose_driver_lacks_rbac_is_refused_up_front(
    k8s_cluster: Any, kube: kc.Target
) -> None:
    """The driver's service account may not create Jobs (issue 34, item 8): ``submit_map``
    asks the API server (a SubjectAccessReview) and refuses the batch with a
    ``PermissionDenied`` naming the account and the verb, before anything is written
    (before: it returned, the driver failed 2 s later and every child read Lost 121 s
    later)."""
    account = f"no-jobs-{os.urandom(3).hex()}"
    k8s_cluster.grant(account, _without("create", "jobs"))
    target = replace(kube, service_account=account)
    with pytest.raises(kc.PermissionDenied) as raised:
        kc.submit_map(k8s_fns.square, [(1,), (2,)], target=target)
    error = raised.value
    assert (error.verb, error.resource, error.namespace) == ("create", "jobs", "default")
    assert error.user == f"system:serviceaccount:default:{account}"
    assert f"service account {account}" in str(error) and "Role" in str(error)
    assert kc.list_batches(target=target) == []
    assert kc.list_jobs(target=target) == []


def test_a_driver_in_a_pod_uses_its_service_account_on_both_spellings() -> None:
    from kinetic_core.batch.driver import pod_credentials

    in_pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    for backend in ("kubernetes", "gke"):
        target = {"backend": backend, "kubeconfig": "kubeconfig-sha256:00", "namespace": "ml"}
        assert pod_credentials(target, in_pod)["in_cluster"] is True, backend
        assert pod_credentials(target, {}) == {}, backend


def test_a_driver_in_a_pod_keeps_the_default_image_its_submitter_was_allowed() -> None:
    """On kind the submitter reached a loopback API server, so the default image was
    allowed; the driver pod reaches the API through the in-cluster address (10.96.0.1),
    which is not loopback: without the overlay its children were refused."""
    from kinetic_core.backends.kubernetes.image import DEFAULT_IMAGE
    from kinetic_core.batch.driver import pod_credentials

    in_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    bare = {"backend": "gke", "namespace": "ml"}
    assert pod_credentials(bare, in_pod) == {"in_cluster": True, "image": DEFAULT_IMAGE}
    for chosen in ({"image": "r.io/me/runner:1"}, {"pod_template": {"spec": {}}}):
        assert pod_credentials({**bare, **chosen}, in_pod) == {"in_cluster": True}, chosen
