"""The Kubernetes API as plain JSON calls, under the one retry policy, with THE mapping of its
errors to kinetic's.

Requests go through the official client's transport (kubeconfig, in-cluster, auth, TLS).
Nothing foreign leaves ``KubeClient.call``: HTTP errors become ``KubeApiError`` (a
``BackendError`` carrying the status, so callers can branch on 404/409), rejected
credentials (401) and a server certificate the configured CA does not verify become
``ConfigError`` at once (never retried), an RBAC refusal (403) ``PermissionDenied`` naming
the missing verb, and a transport failure that outlived the
retries becomes a transient ``BackendError`` (waiting again is safe), all in ``api_errors``.
``KubeClient.stats`` counts requests, bytes and objects read (what a poll costs).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import re
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

# Fail at import, not at the first call, when the extra is missing: the registry then
# names the extra to install. (``kubernetes`` itself loads lazily: it costs seconds.)
if importlib.util.find_spec("kubernetes") is None:
    raise ModuleNotFoundError("No module named 'kubernetes'", name="kubernetes")

import urllib3

from kinetic_core.config.kubeconfig import is_reference, kubeconfig_content
from kinetic_core.config.target import Target
from kinetic_core.errors import BackendError, ConfigError, KineticError, PermissionDenied
from kinetic_core.util.retrying import transient_retry

USER_AGENT = "kinetic-workflows/0.1.0"
DEFAULT_NAMESPACE = "default"
REQUEST_TIMEOUT = 30
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class KubeApiError(BackendError):
    """The API server answered with an HTTP error; ``status`` says which."""

    def __init__(self, status: int, body: str, what: str) -> None:
        self.body = body
        try:
            self.reason = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            self.reason = body
        super().__init__(
            f"{what}: HTTP {status}: {self.reason}",
            status=status,
            transient=status in TRANSIENT_STATUS,
        )


def tls_failure(exc: BaseException) -> BaseException | None:
    """The TLS verification error behind ``exc`` (urllib3 wraps it in MaxRetryError), if any."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, ssl.SSLCertVerificationError | urllib3.exceptions.SSLError):
            return err
        reason = getattr(err, "reason", None)
        todo += [reason if isinstance(reason, BaseException) else None]
        todo += [
            err.__cause__,
            err.__context__,
            *(a for a in err.args if isinstance(a, BaseException)),
        ]
    return None


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: throttling, server errors, dropped connections, timeouts.
    Never a TLS verification failure: a wrong CA does not fix itself."""
    if isinstance(exc, KubeApiError):
        return exc.transient
    if tls_failure(exc) is not None:
        return False
    from kubernetes.client.exceptions import ApiException  # loaded already: it raised

    if isinstance(exc, ApiException):  # the client's own Retry-After answer, or TLS (status 0)
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


# The one retry policy (kinetic_core.util.retrying), told which Kubernetes errors are transient.
API_RETRY = transient_retry(is_transient)


def _foreign_errors() -> tuple[type[BaseException], ...]:
    """What the transport may raise (looked up only when an error is being handled)."""
    from kubernetes.client.exceptions import OpenApiException

    return (urllib3.exceptions.HTTPError, OpenApiException, OSError)


@contextmanager
def api_errors(what: str, tls_hint: Callable[[], str] = lambda: "") -> Iterator[None]:
    """THE boundary: any transport error becomes a BackendError naming the request; a TLS
    verification failure becomes a ConfigError (``tls_hint()`` names the CA and context)."""
    try:
        yield
    except KineticError:
        raise
    except _foreign_errors() as exc:
        tls = tls_failure(exc)
        if tls is not None:
            raise ConfigError(
                f"TLS verification of the Kubernetes API server failed for {what}: {tls}. "
                f"{tls_hint()}The configured CA does not sign the server's certificate: fix the "
                "cluster's certificate-authority in the kubeconfig (or fetch fresh credentials, "
                "e.g. `gcloud container clusters get-credentials …`)."
            ) from exc
        transient = is_transient(exc)
        raise BackendError(
            f"Kubernetes API request {what} failed: {type(exc).__name__}: {exc}"
            + (" (gave up after retrying)" if transient else ""),
            status=getattr(exc, "status", None) or None,
            transient=transient,
        ) from exc


@dataclass(frozen=True)
class CallStats:
    """What the requests of one client cost: requests made, response bytes, objects read."""

    requests: int = 0
    bytes: int = 0
    objects: int = 0


class _Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = CallStats()

    def add(self, size: int, objects: int) -> None:
        with self._lock:
            s = self._stats
            self._stats = replace(
                s, requests=s.requests + 1, bytes=s.bytes + size, objects=s.objects + objects
            )

    def snapshot(self) -> CallStats:
        return self._stats


# "jobs.batch is forbidden: User "system:serviceaccount:ml:runner" cannot create resource
# "jobs" in API group "batch" in the namespace "ml"" (the API server's RBAC message).
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]*)")?'
)
_SERVICE_ACCOUNT = re.compile(r"^system:serviceaccount:(?P<ns>[^:]+):(?P<name>.+)$")
_VERBS = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update", "GET": "get"}


def permission_denied(body: str, method: str, path: str, namespace: str) -> PermissionDenied:
    """THE message of an RBAC refusal: who lacks which verb on which resource where, and
    that the fix is a Role (the credentials themselves were accepted)."""
    try:
        message = str(json.loads(body).get("message") or body)
    except (ValueError, AttributeError):
        message = body
    found = _FORBIDDEN.search(message)
    fields = found.groupdict() if found else {}
    verb = fields.get("verb") or _VERBS.get(method, method.lower())
    resource = fields.get("resource") or path.rstrip("/").split("/")[-1]
    group = fields.get("group") or ""
    where = fields.get("namespace") or namespace
    user = fields.get("user") or ""
    account = _SERVICE_ACCOUNT.match(user)
    who = (
        f"service account {account['name']} (namespace {account['ns']})"
        if account
        else (f"user {user}" if user else "these credentials")
    )
    rule = f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}'
    return PermissionDenied(
        f"Kubernetes denied {who} permission to {verb} {resource} in namespace {where} "
        f"(HTTP 403, {method} {path}): grant it in a Role bound to {who}, e.g. rule {rule} "
        "(see docs/kubernetes.md, 'Permissions'). The credentials are valid: refreshing the "
        f"kubeconfig will not help. The API server said: {message}",
        verb=verb,
        resource=resource,
        namespace=where,
        user=user,
    )


def _parse_kubeconfig(content: str, source: str = "content") -> dict[str, Any]:
    """The kubeconfig as a dict; a ConfigError that quotes none of it (it is secret).
    ``source`` names it in the error: "content", or the file's path."""
    import yaml

    fix = "paste the whole kubeconfig file" if source == "content" else "check that file"
    try:
        data = yaml.safe_load(content)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        at = f" (line {line + 1})" if line is not None else ""
        raise ConfigError(f"The kubeconfig {source} is not valid YAML{at}: {fix}.") from None
    if not isinstance(data, dict) or "clusters" not in data:
        raise ConfigError(f"The kubeconfig {source} is not a kubeconfig (no 'clusters'): {fix}.")
    return data


def _read_kubeconfig_file(path: str) -> dict[str, Any]:
    """A kubeconfig file as a dict, its relative file references (a CA, a client key made
    relative to the file, as the official client reads them) made absolute."""
    with open(path) as fh:
        data = _parse_kubeconfig(fh.read(), path)
    base = os.path.dirname(os.path.abspath(path))
    for section, key, field in _FILE_FIELDS:
        for entry in data.get(section) or []:
            inner = (entry or {}).get(key) or {}
            value = inner.get(field)
            if isinstance(value, str) and value and not os.path.isabs(value):
                inner[field] = os.path.join(base, value)
    return data


# Kubeconfig fields whose ``-data`` twin the official client would write to a temp file.
_FILE_FIELDS = (
    ("clusters", "cluster", "certificate-authority"),
    ("users", "user", "client-certificate"),
    ("users", "user", "client-key"),
)


def in_memory_files(data: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """``data`` with each ``client-key-data`` (and certificate, CA) replaced by the path of
    an anonymous in-memory file (``memfd_create``, ``/proc/self/fd/N``), and those fds.

    Why: the official client writes ``-data`` fields to files in the temp directory (the
    TLS layer takes paths); a private key must not touch the disk. The fds live as long as
    the client (closed by ``KubeClient.close``). Where memfd is missing (not Linux) the
    data is left to the client: a 0600 temp file, removed when the process exits."""
    if not hasattr(os, "memfd_create"):
        return data, []
    fds: list[int] = []
    data = dict(data)
    for section, key, field in _FILE_FIELDS:
        entries = []
        for entry in data.get(section) or []:
            inner = dict((entry or {}).get(key) or {})
            raw = inner.pop(f"{field}-data", None)
            if raw:
                fd = os.memfd_create(f"kinetic-{field}", os.MFD_CLOEXEC)
                fds.append(fd)
                os.write(fd, base64.standard_b64decode(raw))
                inner[field] = f"/proc/self/fd/{fd}"
                entry = {**entry, key: inner}
            entries.append(entry)
        if section in data:
            data[section] = entries
    return data, fds


#: API paths of the namespaced kinds kinetic uses outside the core group.
_GROUPS = {
    "jobs": "/apis/batch/v1",
    "jobsets": "/apis/jobset.x-k8s.io/v1alpha2",
    "workloads": "/apis/kueue.x-k8s.io/v1beta1",
}


class KubeClient:
    """One namespace of one cluster (kubeconfig context or in-cluster), loaded lazily."""

    def __init__(self, target: Target) -> None:
        self.namespace = target.namespace or DEFAULT_NAMESPACE
        self.context = target.kube_context
        self.kubeconfig = target.kubeconfig
        self.in_cluster = bool(target.in_cluster)
        self._api: Any = None
        self._fds: list[int] = []  # in-memory credential files (``in_memory_files``)
        self._lock = threading.Lock()
        self.stats = _Counter()
        self._served: dict[str, bool] = {}  # "group/version" -> served (API discovery)

    @property
    def where(self) -> str:
        return "in-cluster" if self.in_cluster else (self.context or "current-context")

    @property
    def api(self) -> Any:
        """The official ApiClient, built on first use (credentials are read then)."""
        with self._lock:
            if self._api is None:
                from kubernetes import client, config

                try:
                    if self.in_cluster:
                        cfg = client.Configuration()
                        config.load_incluster_config(client_configuration=cfg)
                        self._api = client.ApiClient(cfg)
                    else:
                        if (content := kubeconfig_content(self.kubeconfig)) is not None:
                            data = _parse_kubeconfig(content)
                        else:  # KUBECONFIG read now, not when the client module was imported
                            default = os.environ.get("KUBECONFIG", "~/.kube/config")
                            path = self.kubeconfig
                            if path is None or is_reference(path):  # content never seen here
                                path = default.split(os.pathsep)[0]
                            data = _read_kubeconfig_file(os.path.expanduser(path))
                        data, self._fds = in_memory_files(data)
                        self._api = config.new_client_from_config_dict(data, context=self.context)
                    self._api.user_agent = USER_AGENT
                except ConfigError:
                    raise
                except Exception as exc:
                    where = "in-cluster" if self.in_cluster else f"context {self.where}"
                    raise ConfigError(
                        f"Cannot load Kubernetes credentials ({where}): {exc}. "
                        "Check kubeconfig (or KUBECONFIG) and kube_context, or set in_cluster=True "
                        "inside a pod."
                        + (
                            " (This job was submitted with kubeconfig content this process has "
                            "not seen: give it the same connection or block, or set KUBECONFIG.)"
                            if is_reference(self.kubeconfig)
                            else ""
                        )
                    ) from exc
            return self._api

    @property
    def loaded(self) -> bool:
        """Whether the credentials were read (``api`` was used): asking costs nothing."""
        return self._api is not None

    def close(self) -> None:
        """Close the connections and the in-memory credential files; a later call loads
        the credentials again."""
        with self._lock:
            if self._api is not None:
                self._api.close()
                self._api = None
            for fd in self._fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds = []

    def _tls_hint(self) -> str:
        cfg = getattr(self._api, "configuration", None)
        host = getattr(cfg, "host", "?")
        ca = getattr(cfg, "ssl_ca_cert", None) or "the system CA bundle"
        return f"Context {self.where}, server {host}, CA {ca}. "

    def ns(self, kind: str, name: str | None = None) -> str:
        """The API path of ``kind`` (jobs, pods, secrets, jobsets, workloads) here."""
        group = _GROUPS.get(kind, "/api/v1")
        return f"{group}/namespaces/{self.namespace}/{kind}" + (f"/{name}" if name else "")

    def serves(self, group: str, version: str) -> bool:
        """Whether the API server serves ``group/version``, from API discovery (never from a
        version string), asked once per client and group and remembered."""
        key = f"{group}/{version}"
        if key not in self._served:
            try:
                found = self.call("GET", f"/apis/{group}", what=f"discover API group {group}")
                versions = {v.get("version") for v in found.get("versions") or []}
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                versions = set()
            self._served[key] = version in versions
        return self._served[key]

    def call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        what: str = "",
        raw: bool = False,
        content_type: str = "application/json",
    ) -> Any:
        """One request under the retry policy: parsed JSON (or text with ``raw``)."""
        what = what or f"{method} {path}"
        with api_errors(what, self._tls_hint):
            return API_RETRY.copy()(
                self._request, method, path, query, body, what, raw, content_type
            )

    def _request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        what: str,
        raw: bool,
        content_type: str,
    ) -> Any:
        params = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*params, _request_timeout=REQUEST_TIMEOUT)
        data = response.read()
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
        self._refused(response.status, data, text, method, path, what)
        answer = text if raw else (json.loads(text) if text else {})
        items = answer.get("items") if isinstance(answer, dict) else None
        self.stats.add(len(data or b""), len(items) if isinstance(items, list) else 1)
        return answer

    def _refused(
        self, status: int, data: bytes | None, text: str, method: str, path: str, what: str
    ) -> None:
        """Raise THE error of an HTTP error answer (401, 403, other >= 400)."""
        if status == 401:
            raise ConfigError(
                f"Kubernetes rejected the credentials of context {self.context or 'current-context'} "
                f"(HTTP 401) for {method} {path}: refresh them (e.g. `gcloud container "
                "clusters get-credentials …`)."
            )
        if status == 403:
            raise permission_denied(text, method, path, self.namespace)
        if status >= 400:
            self.stats.add(len(data or b""), 0)
            raise KubeApiError(status, text, what)

    def watch(
        self,
        path: str,
        query: dict[str, Any],
        *,
        read_timeout: float,
        opened: Callable[[Any], None] = lambda response: None,
    ) -> Iterator[dict[str, Any]]:
        """The events of one WATCH request (``watch=1`` is added), one dict per line, until
        the server ends the stream. Not retried here: the caller (``watch.py``) reconnects
        with its own backoff, from the last resourceVersion. ``opened`` gets the response
        (closing it from another thread ends the stream). Errors map as in ``call``."""
        what = f"watch {path}"
        with api_errors(what, self._tls_hint):
            params = self.api.param_serialize(
                method="GET",
                resource_path=path,
                query_params=[(k, v) for k, v in {**query, "watch": "1"}.items()],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(*params, _request_timeout=(REQUEST_TIMEOUT, read_timeout))
            if response.status >= 400:
                data = response.read()
                text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
                self._refused(response.status, data, text, "GET", path, what)
            self.stats.add(0, 0)
            opened(response.response)
            from kubernetes.watch.watch import iter_resp_lines

            for line in iter_resp_lines(response.response):
                if line:
                    yield json.loads(line)
