"""KineticHook: an Airflow connection of type ``kinetic`` -> a ``kinetic_core.Target``."""

from __future__ import annotations

from typing import Any

import kinetic_core as kc
from kinetic_airflow.compat import (
    AirflowNotFoundException,
    BaseHook,
    aget_connection,
    mask_secret,
)

DEFAULT_CONN_ID = "kinetic_default"
_LEGACY_PREFIX = "extra__kinetic__"


def target_from_connection(conn: Any) -> kc.Target:
    """Build a Target from a connection: extra fields (any Target option) + password as signing key.

    Empty values mean "not set here", so ``KINETIC_*`` variables and defaults still apply.
    A value saved as text (``"3"``, ``"75,143"``, JSON) is read as the option's type.
    A ``kubeconfig`` extra holding the file's content (not a path) is masked in task logs;
    the core never serializes it.
    """
    extra = conn.extra_dejson if conn.extra else {}
    if not isinstance(extra, dict):
        raise kc.ConfigError(f"Connection {conn.conn_id!r}: extra must be a JSON object.")
    fields = {
        (key[len(_LEGACY_PREFIX) :] if key.startswith(_LEGACY_PREFIX) else key): value
        for key, value in extra.items()
        if value is not None and value != ""
    }
    if conn.password:
        fields["signing_key"] = conn.password
    kubeconfig = str(fields.get("kubeconfig", ""))
    if "\n" in kubeconfig or kubeconfig.lstrip().startswith("{"):  # content, not a path
        mask_secret(kubeconfig)
    try:
        return kc.Target.from_dict(_typed(fields))
    except kc.ConfigError as exc:
        raise kc.ConfigError(f"Connection {conn.conn_id!r}: {exc}") from None


def _typed(fields: dict[str, Any]) -> dict[str, Any]:
    """Each known option's value as its type (unknown names stay: ``from_dict`` refuses them)."""
    options = {o.name: o for o in kc.target_options()}
    return {k: options[k].parse(v) if k in options else v for k, v in fields.items()}


class KineticHook(BaseHook):
    """Where kinetic jobs run and where their state lives, from an Airflow connection.

    A missing ``kinetic_default`` connection is fine (``KINETIC_*`` env and built-in
    defaults apply: the embedded local backend); any other missing connection id is an error.
    """

    conn_name_attr = "kinetic_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "kinetic"
    hook_name = "Kinetic"

    def __init__(self, kinetic_conn_id: str | None = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kinetic_conn_id = kinetic_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["host", "schema", "port", "login"],
            "relabeling": {"password": "Signing key (HMAC)"},
        }

    def _missing(self, exc: Exception) -> kc.Target:
        if self.kinetic_conn_id == DEFAULT_CONN_ID:
            self.log.debug(
                "No %s connection: using KINETIC_* environment and defaults.", DEFAULT_CONN_ID
            )
            return kc.Target()
        raise AirflowNotFoundException(
            f"Kinetic connection {self.kinetic_conn_id!r} is not defined. Create it (type 'kinetic'), "
            f"or use kinetic_conn_id={DEFAULT_CONN_ID!r} to fall back to KINETIC_* environment variables."
        ) from exc

    def get_target(self, overrides: kc.Target | dict[str, Any] | None = None) -> kc.Target:
        """The connection's Target with ``overrides`` applied (unresolved: env/defaults fill the rest)."""
        if not self.kinetic_conn_id:
            base = kc.Target()
        else:
            try:
                base = target_from_connection(self.get_connection(self.kinetic_conn_id))
            except AirflowNotFoundException as exc:
                base = self._missing(exc)
        return base.merge(kc.Target.coerce(overrides))

    async def aget_target(self, overrides: kc.Target | dict[str, Any] | None = None) -> kc.Target:
        """Async twin of ``get_target`` (for triggers: does not block the event loop)."""
        if not self.kinetic_conn_id:
            base = kc.Target()
        else:
            try:
                base = target_from_connection(await aget_connection(self, self.kinetic_conn_id))
            except AirflowNotFoundException as exc:
                base = self._missing(exc)
        return base.merge(kc.Target.coerce(overrides))

    def get_conn(self) -> kc.Target:
        return self.get_target()

    def test_connection(self) -> tuple[bool, str]:
        """Resolve the target (validates backend and storage URI)."""
        try:
            resolved = self.get_target().resolve()
        except Exception as exc:
            return False, str(exc)
        return True, f"backend={resolved.backend} storage={resolved.storage}"
