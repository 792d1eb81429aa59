"""Who may read the dashboard and who may act through it.

With a token every request must carry it: ``Authorization: Bearer T``, the cookie set
by a first visit with ``?token=T`` (HttpOnly, SameSite=Strict, then a redirect that
drops the token from the address bar), compared in constant time. Actions (POST) also
need the ``X-Kinetic-Action`` header, which a cross-site form cannot send, and an
``Origin`` that is this server's when the browser sends one.
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import URL
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "kinetic_ui_token"
ACTION_HEADER = "x-kinetic-action"
#: Hosts a loopback-bound dashboard answers to without a token (a DNS-rebinding page
#: names its own host and is refused).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def same_token(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class TokenGate:
    """ASGI middleware: 401 for any request without the token (when one is set)."""

    def __init__(self, app: ASGIApp, token: str, cookie_path: str = "/") -> None:
        self.app = app
        self.token = token
        self.cookie_path = cookie_path or "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer ") and same_token(bearer[7:].strip(), self.token):
            await self.app(scope, receive, send)
            return
        if same_token(_cookie(headers.get("cookie", "")), self.token):
            await self.app(scope, receive, send)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if scope["method"] == "GET" and same_token(query.get("token"), self.token):
            await self._enter(scope, query)(scope, receive, send)
            return
        await _refuse(scope)(scope, receive, send)

    def _enter(self, scope: Scope, query: dict[str, str]) -> Response:
        """The first visit with ``?token=``: set the cookie, redirect to the same page
        without the token in its address."""
        query.pop("token", None)
        url = URL(scope=scope)
        target = url.path + (f"?{urlencode(query)}" if query else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            self.token,
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


class LoopbackHosts:
    """ASGI middleware for a token-less dashboard on a loopback address: requests that
    name another host (a DNS-rebinding page) are refused with 421."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _headers(scope).get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in LOOPBACK_HOSTS:
                refused = PlainTextResponse(
                    f"host {host!r} is not this dashboard's: open http://127.0.0.1", 421
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    raw: Any = scope.get("headers") or []
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


def _cookie(header: str) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None
