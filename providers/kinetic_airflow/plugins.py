"""The kinetic dashboard inside Airflow's UI (entry point ``airflow.plugins``).

Airflow 3 mounts a plugin's ``fastapi_apps`` under the api-server, with no authentication
of its own: ``dashboard_app`` puts Airflow's auth in front of the dashboard (the JWT the UI
keeps in its cookie, or a Bearer token, checked by the configured auth manager), and its
``external_views`` (3.1+) show it: a "Kinetic" page in the navigation (the dashboard in an
iframe, same origin, so the cookie goes with it) and a "Kinetic job" tab on each task
instance (that task's kinetic jobs, found by the tags the operator gives them). On a minor
without external views (3.0) the plugin adds nothing, and the operator's extra link (the
job page when ``KINETIC_UI_URL`` is set) is the way in. The dashboard is read-only here.

Each user sees the jobs of the DAGs Airflow lets them read: the dashboard asks the auth
manager ``is_authorized_dag`` (GET) for each job's ``airflow-dag-id`` tag (once per DAG
and request). A job with no DAG (submitted outside Airflow) is shown only to a user who may
read every DAG (``is_authorized_dag`` without details: an admin, say). A job or batch a
user may not read is left out of every list and total, and its pages answer 404.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin

import kinetic_core as kc

log = logging.getLogger(__name__)

#: Where the dashboard is mounted in the api-server (not one of Airflow's reserved prefixes).
URL_PREFIX = "/kinetic"
NAME = "Kinetic"

#: The task instance's kinetic jobs: the dashboard's jobs page filtered by the tags
#: ``identity.task_tags`` gives every job (Airflow fills in the placeholders).
TASK_TAGS = "airflow-dag-id={DAG_ID},airflow-run-id={RUN_ID},airflow-task-id={TASK_ID}"
TASK_JOBS_HREF = f"{URL_PREFIX}/?tag={quote(TASK_TAGS, safe='{}=')}"
#: The tag naming a job's DAG (``identity.task_tags``): what the auth manager is asked of.
DAG_TAG = "airflow-dag-id"
#: Where the middleware leaves the Airflow user it accepted, for ``readable`` to ask about.
USER_KEY = "kinetic_airflow_user"


def supports(hook: str) -> bool:
    """Whether the installed Airflow reads plugin attribute ``hook`` (``fastapi_apps``:
    3.0+; ``external_views``: 3.1+): feature detection, not version numbers."""
    return hook in vars(AirflowPlugin)


class RequireAirflowUser:
    """ASGI middleware: a request reaches the dashboard only with a token Airflow's auth
    manager accepts (else 401, or 403 for a token it rejects), read as Airflow's own
    routes read it: the ``Authorization: Bearer`` header, else the UI's JWT cookie."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            user, refusal = await _user(scope)
            scope.setdefault("state", {})[USER_KEY] = user
            if refusal is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _user(scope: Any) -> tuple[Any | None, Any | None]:
    """(the user Airflow accepts for this request, None), else (None, the response to send)."""
    from starlette.requests import HTTPConnection
    from starlette.responses import PlainTextResponse

    conn = HTTPConnection(scope)
    injected = _injected_user(scope)
    if injected is not None:
        return injected, None
    token = _token(conn)
    if not token:
        return None, PlainTextResponse(
            "Not authenticated: sign in to Airflow, then open the Kinetic page.", 401
        )
    try:
        user = await _auth_manager().get_user_from_token(token)
    except Exception as exc:  # jwt's ExpiredSignatureError / InvalidTokenError, by version
        log.info("kinetic dashboard: token refused (%s)", type(exc).__name__)
        return None, PlainTextResponse("Token refused: sign in to Airflow again.", 403)
    if user is None:
        return None, PlainTextResponse("Not authenticated.", 401)
    return user, None


def _injected_user(scope: Any) -> Any | None:
    """The user one of Airflow's own middlewares resolved for this request (3.1+: the JWT
    refresh middleware, which also renews an expired cookie), trusted as Airflow's routes
    trust it: on 3.3+ only with its trusted-middleware mark."""
    state = scope.get("state") or {}
    user = state.get("user")
    if user is None:
        return None
    try:
        from airflow.api_fastapi.core_api.security import USER_INJECTED_BY_TRUSTED_MIDDLEWARE
    except ImportError:  # Airflow 3.1, 3.2: get_user trusts any user a middleware set
        return user
    trusted = state.get("user_authenticated_via") is USER_INJECTED_BY_TRUSTED_MIDDLEWARE
    return user if trusted else None


def _token(conn: Any) -> str | None:
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    scheme, _, credentials = conn.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return str(credentials.strip())
    cookie = conn.cookies.get(COOKIE_NAME_JWT_TOKEN)
    return str(cookie) if cookie else None


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def readable(scope: Mapping[str, Any]) -> Callable[[Mapping[str, str]], bool]:
    """Which jobs the request's Airflow user may read (see the module docstring): asked of
    the auth manager once per DAG and request. No user (never past the middleware): none."""
    user = (scope.get("state") or {}).get(USER_KEY)
    if user is None:
        return lambda tags: False
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    manager = _auth_manager()
    asked: dict[str | None, bool] = {}

    def may_read(tags: Mapping[str, str]) -> bool:
        dag_id = tags.get(DAG_TAG) or None
        if dag_id not in asked:
            details = DagDetails(id=dag_id) if dag_id else None  # None: every DAG
            try:
                asked[dag_id] = bool(
                    manager.is_authorized_dag(method="GET", user=user, details=details)
                )
            except Exception as exc:  # an auth manager that fails denies
                log.warning("kinetic dashboard: is_authorized_dag failed: %s", exc)
                asked[dag_id] = False
        return asked[dag_id]

    return may_read


def dashboard_app(storage: str | None = None) -> Any:
    """The read-only dashboard over ``storage`` (None: ``KINETIC_STORAGE``, else the
    default root) behind Airflow's auth, each user seeing the jobs of the DAGs they may
    read. Links follow the prefix the api-server mounts it at (the ASGI ``root_path``),
    also behind a proxy that serves Airflow under a path."""
    return RequireAirflowUser(kc.dashboard_app(storage, allow_actions=False, readable=readable))


def _fastapi_apps() -> list[dict[str, Any]]:
    try:
        app = dashboard_app()
    except Exception as exc:  # the ui extra missing, or a bad storage setting
        log.warning("kinetic dashboard not mounted in Airflow: %s", exc)
        return []
    return [{"app": app, "url_prefix": URL_PREFIX, "name": "Kinetic dashboard"}]


def _external_views() -> list[dict[str, Any]]:
    return [
        {"name": NAME, "href": f"{URL_PREFIX}/", "url_route": "kinetic", "destination": "nav"},
        {
            "name": "Kinetic job",
            "href": TASK_JOBS_HREF,
            "url_route": "kinetic-task-jobs",
            "destination": "task_instance",
        },
    ]


class KineticPlugin(AirflowPlugin):
    """What the installed Airflow supports of the dashboard (see the module docstring)."""

    name = "kinetic"


# Mounted only where the UI can show it: Airflow 3.0 has fastapi_apps but no external
# views, and its UI moves the login token out of the cookie, so a browser could not reach
# a mounted dashboard anyway; there the operator's extra link is the way in.
if supports("fastapi_apps") and supports("external_views"):
    KineticPlugin.fastapi_apps = _fastapi_apps()
    if KineticPlugin.fastapi_apps:
        KineticPlugin.external_views = _external_views()
