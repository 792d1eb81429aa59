"""Target: where and how a job runs.

Resolution per field: explicit argument > ``KINETIC_<FIELD>`` environment variable >
built-in default. A Target is plain data (JSON round-trip) so triggers and blocks can
carry it; the signing key is a secret and is never serialized.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from kinetic_core.config.kubeconfig import kubeconfig_reference, remember_kubeconfig
from kinetic_core.errors import ConfigError
from kinetic_core.util import registry
from kinetic_core.util.envvars import env_spec

# Derived from the registry: a backend or scheme registered there is valid here.
BACKENDS = tuple(registry.BACKENDS)
STORAGE_SCHEMES = tuple(f"{scheme}://" for scheme in registry.STORAGE)
SECRET_FIELDS = frozenset({"signing_key"})
#: Seconds before a job that vanished from its backend reads Lost (``lost_grace``).
DEFAULT_LOST_GRACE = 120.0
#: How long ``debug=True`` keeps a failed job's processes or pod at most (24 h; debugging.py).
DEBUG_HOLD = 24 * 3600
#: What the Kubernetes manifest of a debug job sets on its runner container, so that a held
#: runner can say how to ``kubectl exec`` into it (pod, namespace, container).
DEBUG_POD_ENV = ("KINETIC_POD_NAME", "KINETIC_POD_NAMESPACE", "KINETIC_CONTAINER")
DEFAULT_STORAGE = "file://~/.kinetic"
# Per-job choices, never read from KINETIC_*: inside a job KINETIC_OUTPUT_DIR is the job's own
# folder (a job that submits another must not hand it that), and a stray KINETIC_DEBUG
# must not hold every failed job's processes.
NOT_FROM_ENV = frozenset({"output_dir", "debug"})
# Folders of a storage root that are the job store's own: never a job's output_dir.
_STORE_FOLDERS = ("jobs", "keys", "batches", "data", "backend-local", "backend-slurm")


@dataclass(frozen=True)
class Target:
    """Where a job runs and where its state lives. ``None`` means "not set here"."""

    backend: str | None = None
    storage: str | None = None
    # Kubernetes / GKE options (owned and checked by backends/kubernetes/kind.py).
    namespace: str | None = None
    image: str | None = None
    accelerator: str | None = None
    spot: bool | None = None
    resources: dict[str, Any] | None = None
    service_account: str | None = None
    kube_context: str | None = None
    # a kubeconfig: its path, or its content (YAML, kept secret: never serialized or shown);
    # default: $KUBECONFIG, ~/.kube/config
    kubeconfig: str | None = field(default=None, repr=False)
    in_cluster: bool | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    project: str | None = None
    # Pod options (backends/kubernetes/: checked in pod_options.py, made a pod in pod_spec.py).
    secret_env: dict[str, str] | None = None  # {"NAME": "secret-name/key"}
    env_from: list[dict[str, Any]] | None = None  # [{"secret": name} | {"config_map": name}]
    volumes: dict[str, dict[str, Any]] | None = None  # {"/mount/path": {"pvc": "claim"}}
    image_pull_policy: str | None = None
    image_pull_secrets: list[str] | None = None
    priority_class: str | None = None
    affinity: dict[str, Any] | None = None
    security_context: dict[str, Any] | None = None  # the pod's securityContext
    termination_grace_period: int | None = None  # seconds between SIGTERM and SIGKILL
    ttl_after_finished: int | None = None  # seconds a finished Job is kept (default 1 day)
    active_deadline: float | None = None  # seconds the cluster lets the Job run (default life_span)
    pod_template: dict[str, Any] | str | None = None  # pod spec (or YAML path) merged under ours
    # extra packages installed with uv at pod start into a cached environment (bootstrap.py)
    requirements: list[str] | None = None
    # Local backend option: where supervisor records and logs live (default: beside the storage).
    local_dir: str | None = None
    # Slurm options (owned and checked by backends/slurm/kind.py; sbatch flags in script.py).
    partition: str | None = field(
        default=None,
        metadata={
            "help": "Slurm partition of the job (sbatch --partition; default: the cluster's).",
            "example": "gpu",
        },
    )
    account: str | None = field(
        default=None,
        metadata={"help": "Slurm account charged for the job (sbatch --account).", "example": "ml"},
    )
    qos: str | None = field(
        default=None,
        metadata={"help": "Slurm quality of service of the job (sbatch --qos).", "example": "high"},
    )
    cpus: int | None = field(
        default=None,
        metadata={
            "help": "Slurm: CPUs per node (one worker per node: --cpus-per-task).",
            "example": 8,
        },
    )
    memory: str | None = field(
        default=None,
        metadata={
            "help": "Slurm: memory per node (sbatch --mem: a number with K, M, G or T).",
            "example": "32G",
        },
    )
    gpus: str | int | None = field(
        default=None,
        metadata={
            "help": "Slurm: GPUs per node, a count or type:count (sbatch --gres=gpu:...).",
            "example": "a100:4",
        },
    )
    constraint: str | None = field(
        default=None,
        metadata={
            "help": "Slurm: node features the job needs (sbatch --constraint).",
            "example": "ib&h100",
        },
    )
    sbatch_args: list[str] | None = field(
        default=None,
        metadata={
            "help": "Slurm: extra sbatch flags, each --name=value (an escape hatch; the flags "
            "kinetic sets itself are refused).",
            "example": ["--exclusive", "--reservation=maint"],
        },
    )
    slurm_dir: str | None = field(
        default=None,
        metadata={
            "help": "Slurm: a folder on the filesystem every node shares, for each job's "
            "script and output files (default: beside a file:// storage root, else "
            "~/.kinetic/backend-slurm).",
            "example": "/shared/kinetic",
        },
    )
    # Job behaviour.
    # names/patterns captured at submit (values travel signed), or {"NAME": "literal"}
    env: list[str] | dict[str, str | None] | None = None
    life_span: float | None = None  # max seconds running
    schedule_timeout: float | None = None  # max seconds pending
    poll_interval: float | None = None  # steady-state seconds between status polls
    lost_grace: float | None = None  # seconds a vanished job may be unseen before it is Lost
    pickle_by_value: list[str] | None = None  # module names shipped by value
    tags: dict[str, str] | None = None
    # where the job's outputs go: {output_dir}/{job_id}/ (gs://... or file://...; default:
    # outputs/{job_id}/ under the storage root). See docs/data.md.
    output_dir: str | None = None
    # keep a failed job's processes (local) or pod (Kubernetes) to inspect (debugging.py: 24 h)
    debug: bool | None = None
    # Recovery (see docs/recovery.md): restarts after a preemption, a lost job or a listed exit code.
    max_recoveries: int | None = None  # default: 3 with spot, 0 otherwise
    recover_on_exit_codes: list[int] | None = None
    # Multi-host jobs: how many hosts (one pod each) one job spans, e.g. gpu-h100x8 on 2 nodes.
    # A TPU slice fixes its own count (tpu-v5e-16: 4); default: the accelerator's, else 1.
    num_hosts: int | None = None
    # Kueue (Kubernetes): the LocalQueue that admits the job, its WorkloadPriorityClass, and
    # the max seconds it may wait for admission (not counted in life_span or schedule_timeout).
    queue: str | None = None
    priority: str | None = None
    queue_timeout: float | None = None
    # Cost (usage.py): accelerator -> {"on_demand": price, "spot": price} per chip-hour, an
    # optional "currency"; or the path of a JSON/YAML file holding it (read at resolve).
    prices: dict[str, Any] | str | None = None
    signing_key: str | None = field(default=None, repr=False)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def coerce(cls, value: Target | dict[str, Any] | None) -> Target:
        """Accept a Target, a plain dict (e.g. from JSON or an Airflow param) or None."""
        if value is None:
            return cls()
        if isinstance(value, Target):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        raise ConfigError(f"target must be a Target, a dict or None, not {type(value).__name__}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Target:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"Unknown target option(s) {unknown}; valid options are {sorted(known)}."
            )
        return cls(**data)

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Target:
        """A target read back from storage (a handle, a batch manifest): options this
        version does not know, written by a newer one, are ignored instead of refused."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> Target:
        return cls.from_dict(json.loads(text))

    def merge(self, overrides: Target | dict[str, Any] | None) -> Target:
        """This target with every field that ``overrides`` sets replacing ours."""
        other = Target.coerce(overrides)
        changes = {
            f.name: getattr(other, f.name)
            for f in fields(other)
            if getattr(other, f.name) is not None
        }
        return dataclasses.replace(self, **changes)

    def __post_init__(self) -> None:
        remember_kubeconfig(self.kubeconfig)

    def to_dict(self, *, include_secrets: bool = False) -> dict[str, Any]:
        """The fields that are set; without ``include_secrets`` the signing key is left out
        and kubeconfig content becomes its reference (see ``config/kubeconfig``)."""
        data = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None
            and (include_secrets or f.name not in SECRET_FIELDS)
        }
        if not include_secrets and "kubeconfig" in data:
            data["kubeconfig"] = kubeconfig_reference(data["kubeconfig"])
        return data

    def to_json(self) -> str:
        """JSON without secrets: safe for handles, XCom, trigger kwargs and logs."""
        return json.dumps(self.to_dict(), sort_keys=True)

    # ---- resolution ---------------------------------------------------------------------
    def resolve(self, environ: dict[str, str] | None = None) -> Target:
        """Fill unset fields from ``KINETIC_*`` variables, then defaults; validate the result."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            var = f"KINETIC_{f.name.upper()}"
            if value is None and f.name not in NOT_FROM_ENV and env.get(var, "") != "":
                value = _parse_env(var, env[var], _target_hints()[f.name])
            values[f.name] = value
        values["backend"] = values["backend"] or registry.DEFAULT_BACKEND
        values["storage"] = normalize_storage_uri(values["storage"] or DEFAULT_STORAGE)
        if values["output_dir"] is not None:
            values["output_dir"] = normalize_output_dir(values["output_dir"], values["storage"])
        if values["prices"] is not None:
            values["prices"] = price_table(values["prices"])  # a file's table travels as data
        resolved = Target(**values)
        resolved.validate()
        return resolved

    def validate(self) -> None:
        if self.backend is not None and self.backend not in registry.BACKENDS:
            raise ConfigError(
                f"Unknown backend {self.backend!r}; choose one of {', '.join(registry.BACKENDS)} "
                "(argument backend= or KINETIC_BACKEND)."
            )
        for name in (
            "life_span",
            "schedule_timeout",
            "queue_timeout",
            "poll_interval",
            "lost_grace",
        ):
            if getattr(self, name) is not None:
                positive_seconds(getattr(self, name), name)
        env_spec(self.env)
        if self.debug is not None and not isinstance(self.debug, bool):
            raise ConfigError(f"debug must be True or False, got {self.debug!r}.")
        validate_num_hosts(self.num_hosts)
        self._check_backend_options()
        if self.tags is not None:
            validate_tags(self.tags)
        validate_recovery(self.max_recoveries, self.recover_on_exit_codes)
        if self.prices is not None:
            price_table(self.prices)

    def _check_backend_options(self) -> None:
        """Each backend's options are checked by its kind, whatever backend this target
        names: a bad pod option is refused before anything is written, even on ``local``."""
        kinds = {id(k): k for k in map(registry.backend_kind, registry.BACKENDS)}.values()
        for kind in kinds:
            if any(getattr(self, name) is not None for name in kind.options):
                kind.check_options(self)

    def ignored_options(self) -> list[str]:
        """The options set here that this target's backend has no use for (another
        backend's: ``accelerator``, ``spot``, ``project`` on ``local``), sorted. A job's
        shape (``num_hosts``) every backend honours."""
        own = registry.backend_kind(self.backend).options
        others = {n for b in registry.BACKENDS for n in registry.backend_kind(b).options}
        unused = others - own - _EVERY_BACKEND
        return sorted(n for n in unused if getattr(self, n) not in (None, False, "", [], {}))


#: Options of another backend that every backend honours all the same.
_EVERY_BACKEND = frozenset({"num_hosts"})


def validate_recovery(max_recoveries: Any, exit_codes: Any) -> None:
    """ConfigError unless the recovery policy is a count >= 0 and a list of exit codes."""
    if max_recoveries is not None and (
        not isinstance(max_recoveries, int)
        or isinstance(max_recoveries, bool)
        or max_recoveries < 0
    ):
        raise ConfigError(
            f"max_recoveries must be a whole number >= 0, got {max_recoveries!r} "
            "(0 turns recovery off)."
        )
    if exit_codes is not None and not (
        isinstance(exit_codes, list)
        and all(isinstance(c, int) and not isinstance(c, bool) and 0 < c < 256 for c in exit_codes)
    ):
        raise ConfigError(
            f"recover_on_exit_codes must be a list of exit codes 1-255, got {exit_codes!r}."
        )


PRICE_KINDS = ("on_demand", "spot")
PRICES_SHAPE = (
    'a dict of accelerator -> prices per chip-hour, with an optional "currency", e.g. '
    '{"tpu-v5e-16": {"on_demand": 1.2, "spot": 0.5}, "gpu-l4": {"on_demand": 0.7}, '
    '"currency": "USD"} (example figures, not real prices); an accelerator may be named '
    "exactly or by its family (tpu-v5e, gpu-l4); or the path of a JSON/YAML file holding it"
)


def price_table(value: Any) -> dict[str, Any]:
    """The price table ``value`` names (a dict, a JSON text, or the path of a JSON/YAML
    file), checked: ``{accelerator: {"on_demand": float, "spot": float}, "currency": str}``
    with at least one price per accelerator. ConfigError stating that shape otherwise."""
    source = value
    if isinstance(value, str):
        value = _read_prices(value)
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"prices must be {PRICES_SHAPE}; got {source!r}.")
    table: dict[str, Any] = {}
    for name, prices in value.items():
        if name == "currency":
            if not isinstance(prices, str) or not prices.strip():
                raise ConfigError(f"prices: currency must be a name such as USD, got {prices!r}.")
            table["currency"] = prices.strip()
            continue
        if (
            not isinstance(name, str)
            or not name
            or not isinstance(prices, dict)
            or not prices
            or set(prices) - set(PRICE_KINDS)
        ):
            raise ConfigError(
                f"prices: entry {name!r}: {prices!r} is wrong; prices must be {PRICES_SHAPE}."
            )
        for kind, price in prices.items():
            if (
                not isinstance(price, int | float)
                or isinstance(price, bool)
                or not 0 <= price < float("inf")
            ):
                raise ConfigError(
                    f"prices: {name}.{kind} must be a number >= 0 (per chip-hour), got {price!r}."
                )
        table[name] = {kind: float(price) for kind, price in prices.items()}
    return table


def _read_prices(text: str) -> Any:
    """A price table from JSON text or from a JSON/YAML file (YAML needs PyYAML)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"prices: {text[:60]!r} is not valid JSON ({exc}).") from None
    path = Path(os.path.expanduser(text))
    try:
        raw = path.read_text()
    except OSError as exc:
        raise ConfigError(
            f"prices: cannot read the price table file {text!r} ({exc}); give the path of "
            f"a JSON or YAML file holding {PRICES_SHAPE}."
        ) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"prices: {text!r} is YAML, which needs PyYAML (pip install "
                "'kinetic-workflows[kubernetes]'); or write the table as JSON."
            ) from None
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(f"prices: {text!r} is not valid YAML ({exc}).") from None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"prices: {text!r} is not valid JSON ({exc}).") from None


def validate_num_hosts(num_hosts: Any) -> None:
    """ConfigError unless ``num_hosts`` is unset or a whole number >= 1."""
    if num_hosts is not None and (
        not isinstance(num_hosts, int) or isinstance(num_hosts, bool) or num_hosts < 1
    ):
        raise ConfigError(
            f"num_hosts must be a whole number >= 1 (hosts, one pod each), got {num_hosts!r}."
        )


def positive_seconds(value: Any, name: str) -> float:
    """``value`` as float seconds; ConfigError naming ``name`` unless it is a finite
    number > 0 (NaN compares False with everything, and infinity is no deadline)."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 < value < float("inf")
    ):
        raise ConfigError(
            f"{name} must be a positive number of seconds, got {value!r}; leave it unset "
            "for no limit."
        )
    return float(value)


def validate_tags(tags: Any) -> dict[str, str]:
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise ConfigError(f"tags must be a dict of str to str, got {tags!r}.")
    return tags


def normalize_storage_uri(uri: str) -> str:
    """Check a storage URI and expand ``~`` in file URIs; raise ConfigError when malformed."""
    if not isinstance(uri, str) or not uri.startswith(STORAGE_SCHEMES):
        raise ConfigError(
            f"Malformed storage URI {uri!r}: use a URI starting with one of "
            f"{', '.join(STORAGE_SCHEMES)} such as file:///absolute/path, file://~/dir or "
            "gs://bucket/prefix (argument storage= or KINETIC_STORAGE)."
        )
    if uri.startswith("file://"):
        path = uri[len("file://") :]
        if not path:
            raise ConfigError(f"Storage URI {uri!r} names no directory.")
        if not path.startswith(("/", "~")):
            # Resolving against the working directory would put state wherever a process
            # happens to start (a triggerer, a worker): the same URI must mean one place.
            raise ConfigError(
                f"Storage URI {uri!r} names a relative path: use an absolute path "
                f"(file:///absolute/{path}) or one under your home (file://~/{path})."
            )
        return "file://" + str(Path(os.path.expanduser(path)).absolute())
    bucket = uri[len("gs://") :].split("/", 1)[0]
    if not bucket:
        raise ConfigError(f"Storage URI {uri!r} names no bucket: use gs://bucket/prefix.")
    return uri.rstrip("/")


def normalize_output_dir(uri: Any, storage: str) -> str:
    """Check a job's ``output_dir`` (a plain absolute path means ``file://``) and return it
    normalized; ConfigError for a relative path, another scheme, or a place inside the job
    store's own folders (``jobs/``...) of ``storage``, before anything is written."""
    if isinstance(uri, str) and uri.startswith("/"):
        uri = "file://" + uri
    if not isinstance(uri, str) or not uri.startswith(STORAGE_SCHEMES):
        raise ConfigError(
            f"output_dir {uri!r} is not a storage location: use gs://bucket/path, "
            "file:///absolute/path or an absolute path."
        )
    try:
        normalized = normalize_storage_uri(uri)
    except ConfigError as exc:
        raise ConfigError(f"output_dir: {exc}") from None
    inside = _relative_to(normalized, storage)
    if inside is not None and (not inside or inside.split("/")[0] in _STORE_FOLDERS):
        raise ConfigError(
            f"output_dir {uri!r} is inside the job store {storage} (its own "
            f"{inside.split('/')[0] or 'root'} folder): choose a folder outside it, or under "
            f"{storage}/outputs/."
        )
    return normalized


def _relative_to(uri: str, root: str) -> str | None:
    """``uri``'s path below ``root`` ('' for the root itself), None when outside it
    (file:// paths compared after resolving links)."""
    if uri.startswith("file://") and root.startswith("file://"):
        uri, root = ("file://" + os.path.realpath(u[len("file://") :]) for u in (uri, root))
    if uri == root:
        return ""
    return uri[len(root) + 1 :] if uri.startswith(root.rstrip("/") + "/") else None


def _parse_env(var: str, raw: str, hint: Any) -> Any:
    """Parse one KINETIC_* value according to the field's type."""
    args = [a for a in get_args(hint) if a is not type(None)]
    kind = args[0] if args else hint
    origin = get_origin(kind) or kind
    try:
        if origin is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if origin is float:
            return float(raw)
        if origin is int:
            return int(raw)
        if origin in (list, dict) and raw.lstrip().startswith(("[", "{")):
            return json.loads(raw)
        if origin is list:
            items = [s.strip() for s in raw.split(",") if s.strip()]
            return [int(i) for i in items] if get_args(kind) == (int,) else items
        if origin is dict and str not in args:
            return json.loads(raw)
    except ValueError:
        expected = _EXPECTED.get(origin, "JSON")
        raise ConfigError(f"Cannot read {var}={raw!r}: set it to {expected}.") from None
    return raw


#: What a KINETIC_* variable of each field type holds, as the error says it.
_EXPECTED: dict[Any, str] = {
    bool: "true or false (1/0, yes/no, on/off)",
    float: "a number of seconds (e.g. 3600)",
    int: "a whole number",
    list: "a comma-separated list or a JSON list",
    dict: "a JSON object",
}


@functools.cache
def _target_hints() -> dict[str, Any]:
    """Target's field types, evaluated once: ``get_type_hints`` cost ~1.4 ms per submit."""
    return get_type_hints(Target)
