"""``kinetic ui``: a web dashboard that reads only the storage root.

``create_app`` builds the Starlette app (mount it anywhere: Airflow's plugin mounts it
at ``/kinetic`` and passes ``root_path``); ``serve`` runs it with uvicorn, bound to
127.0.0.1 unless told otherwise, and then only with a token. Needs the ``ui`` extra
(``pip install 'kinetic-workflows[ui]'``).
"""

from __future__ import annotations

import ipaddress
import secrets
from typing import TYPE_CHECKING

import kinetic_core as kc

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from kinetic_core.ui.views import Readable

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "dashboard_app", "is_loopback", "serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8265


def _require_extra() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise kc.ConfigError(
            f"The dashboard needs the ui extra ({exc.name} is missing): "
            "pip install 'kinetic-workflows[ui]'."
        ) from None


def create_app(
    storage: str | None = None,
    *,
    token: str | None = None,
    allow_actions: bool = False,
    root_path: str = "",
    readable: Readable | None = None,
) -> Starlette:
    """The dashboard over ``storage`` (None: the resolved Target's storage root).

    ``token``: every request must carry it (Bearer header, or the cookie a first visit
    with ``?token=`` sets). ``allow_actions``: the cancel buttons and POST endpoints
    work (else 403). ``root_path``: the prefix the app is mounted under, used in every
    link the pages render. ``readable``: which jobs each request may read (see
    ``Readable``); a job it may not read is left out of every list and total, and its
    pages answer 404 as an unknown job's do."""
    _require_extra()
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise kc.ConfigError("token must be a string of at least 8 characters (or None).")
    if root_path and (not root_path.startswith("/") or "//" in root_path):
        raise kc.ConfigError(f"root_path must be a path such as /kinetic, got {root_path!r}.")
    if readable is not None and not callable(readable):
        raise kc.ConfigError("readable must be a function of a request's scope (or None).")
    from kinetic_core.ui.app import build

    return build(
        storage,
        token=token,
        allow_actions=allow_actions,
        root_path=root_path,
        readable=readable,
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int, token: str | None) -> str:
    """The address to open (with the token on the first visit)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def prepare(host: str, token: str | None) -> str | None:
    """The token a server on ``host`` needs: the given one, a generated one when the
    address is not loopback (every request must then carry it), else None."""
    if token is not None:
        return token
    return None if is_loopback(host) else secrets.token_urlsafe(24)


def serve(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    storage: str | None = None,
    token: str | None = None,
    allow_actions: bool = False,
) -> None:
    """Run the dashboard until interrupted. Off loopback a token is required: the one
    given, else a generated one (printed once, with the URL)."""
    _require_extra()
    import uvicorn

    from kinetic_core.ui.auth import LoopbackHosts

    token = prepare(host, token)
    app = create_app(storage, token=token, allow_actions=allow_actions)
    served = app if token else LoopbackHosts(app)
    print(f"kinetic dashboard: {url_of(host, port, token)}", flush=True)
    uvicorn.run(served, host=host, port=port, log_level="warning")


#: The public name (``kc.dashboard_app``) under which providers mount the dashboard
#: (Airflow's plugin): ``create_app`` itself, exported without importing Starlette.
dashboard_app = create_app
