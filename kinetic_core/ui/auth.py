"""Who may read the dashboard and who may act through it.

With a token every request must carry it: ``Authorization: Bearer T``, or the cookie set
by a first visit with ``?token=T`` (HttpOnly, SameSite=Strict), compared in constant
time. A ``?token=`` is always redirected away (also when the request carries the cookie
already), so it stays in no address bar, history or Referer; the redirect stays on this
site (a path such as ``//evil.example/`` is made ``/evil.example/``). The cookie is named
per server (from the token: two dashboards on one host, whose cookies the browser shares
across ports, do not sign each other out) and holds a value derived from the token, never
the token itself (a cookie reaches every service on the host). Actions (POST) also need
the ``X-Kinetic-Action`` header, which a cross-site form cannot send, and an ``Origin``
that is this server's when the browser sends one.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import URL
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE_PREFIX = "kinetic_ui_"
ACTION_HEADER = "x-kinetic-action"
#: Hosts a loopback-bound dashboard answers to without a token (a DNS-rebinding page
#: names its own host and is refused).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def same_token(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def cookie_name(token: str) -> str:
    """This server's cookie: named from its token, so each dashboard has its own."""
    return (
        COOKIE_PREFIX
        + hashlib.sha256(b"kinetic-ui-cookie-name\0" + token.encode()).hexdigest()[:16]
    )


def cookie_value(token: str) -> str:
    """What the cookie holds: proof of the token, not the token (other services on the
    host receive the cookie too)."""
    return hmac.new(token.encode(), b"kinetic-ui-cookie", hashlib.sha256).hexdigest()


def same_site_path(path: str) -> str:
    """``path`` as a redirect target that stays on this site: one leading slash (``//host``
    and ``/\\host`` are other sites to a browser)."""
    return "/" + path.lstrip("/\\")


class TokenGate:
    """ASGI middleware: 401 for any request without the token (when one is set)."""

    def __init__(self, app: ASGIApp, token: str, cookie_path: str = "/") -> None:
        self.app = app
        self.token = token
        self.cookie_path = cookie_path or "/"
        self.cookie = cookie_name(token)
        self.proof = cookie_value(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        bearer = headers.get("authorization", "")
        signed_in = (
            bearer.lower().startswith("bearer ") and same_token(bearer[7:].strip(), self.token)
        ) or same_token(_cookie(headers.get("cookie", ""), self.cookie), self.proof)
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = [value for key, value in query if key == "token"]
        if given and scope["method"] in ("GET", "HEAD"):
            entering = any(same_token(value, self.token) for value in given)
            if entering or signed_in:  # never leave a token in the address bar
                await self._away(scope, query, set_cookie=entering)(scope, receive, send)
                return
        if signed_in:
            await self.app(scope, receive, send)
            return
        await _refuse(scope)(scope, receive, send)

    def _away(self, scope: Scope, query: list[tuple[str, str]], *, set_cookie: bool) -> Response:
        """Redirect to the same page without ``token`` in its address (on this site);
        with the right token, set the cookie first."""
        kept = [(key, value) for key, value in query if key != "token"]
        url = URL(scope=scope)
        target = same_site_path(url.path) + (f"?{urlencode(kept)}" if kept else "")
        response = RedirectResponse(target, status_code=303)
        if set_cookie:
            response.set_cookie(
                self.cookie,
                self.proof,
                path=self.cookie_path,
                httponly=True,
                samesite="strict",
                secure=url.scheme == "https",
            )
        return response


def _refuse(scope: Scope) -> Response:
    path = scope.get("path", "")
    message = (
        "This kinetic dashboard needs its token: open the URL `kinetic ui` printed "
        "(?token=...), or send Authorization: Bearer <token>."
    )
    if "/api/" in path:
        return JSONResponse({"error": message}, status_code=401)
    return PlainTextResponse(message, status_code=401, headers={"WWW-Authenticate": "Bearer"})


def action_allowed(scope: Scope) -> str | None:
    """None if this POST may act, else why not (a CSRF check): the action header must be
    there, and an ``Origin`` the browser sent must be this server's."""
    headers = _headers(scope)
    if headers.get(ACTION_HEADER) != "1":
        return f"actions need the header {ACTION_HEADER.title()}: 1 (sent by the dashboard's page)"
    origin = headers.get("origin")
    host = headers.get("host")
    if origin and origin != "null" and host and origin.split("://", 1)[-1] != host:
        return f"origin {origin} is not this dashboard's ({host})"
    return None


def loopback_name(host: str) -> bool:
    """Whether a Host header names this machine by a loopback name: ``localhost`` or a
    loopback address (any of 127.0.0.0/8, ``[::1]``), with or without a port. A
    DNS-rebinding page names its own host, never one of these."""
    name = host
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        name = host.rsplit(":", 1)[0]
    if name in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LoopbackHosts:
    """ASGI middleware for a token-less dashboard on a loopback address: requests that
    name another host (a DNS-rebinding page) are refused with 421."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _headers(scope).get("host", "")
            if not loopback_name(host):
                refused = PlainTextResponse(
                    f"host {host!r} is not this dashboard's: open http://127.0.0.1", 421
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    raw: Any = scope.get("headers") or []
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


def _cookie(header: str, name: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None
