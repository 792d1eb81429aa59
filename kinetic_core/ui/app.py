"""The dashboard's Starlette app: pages, the JSON API they fetch, and the actions.

Endpoints are plain functions (Starlette runs them in its thread pool): every read
blocks on storage. A KineticError becomes a status code: an invalid id 400, an unknown
job 404, a bad filter 400; anything else is the framework's 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import kinetic_core as kc
import kinetic_core.ui.pages as pages
from kinetic_core.ui.auth import TokenGate, action_allowed
from kinetic_core.ui.views import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    SORTS,
    NotFound,
    Readable,
    Reader,
    sort_rows,
)

STATIC = Path(__file__).parent / "static"
#: The listing a page with a bad filter shows: none.
_NOTHING: dict[str, Any] = {"jobs": [], "count": 0, "next_until": None}
Endpoint = Callable[[Request], Response]


class Dashboard:
    """The routes over one ``Reader``; ``root_path`` prefixes every link it renders;
    ``readable`` says which jobs each request may read (None: all)."""

    def __init__(
        self,
        reader: Reader,
        *,
        allow_actions: bool,
        root_path: str,
        readable: Readable | None = None,
    ) -> None:
        self._reader = reader
        self.allow_actions = allow_actions
        self.root_path = root_path.rstrip("/")
        self.readable = readable

    def reader_for(self, request: Request) -> Reader:
        """The reader as this request's user sees the store."""
        if self.readable is None:
            return self._reader
        return self._reader.seen_by(self.readable(request.scope))

    def base(self, request: Request) -> str:
        """Where this app is mounted: the configured prefix, else the server's."""
        return self.root_path or str(request.scope.get("root_path") or "").rstrip("/")

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.jobs_page),
            Route("/jobs/{job_id}", self.job_page),
            Route("/batches", self.batches_page),
            Route("/batches/{group_id}", self.batch_page),
            Route("/usage", self.usage_page),
            Route("/favicon.ico", self.favicon),
            Route("/api/jobs", self.api_jobs),
            Route("/api/jobs/{job_id}", self.api_job),
            Route("/api/jobs/{job_id}/logs", self.api_logs),
            Route("/api/jobs/{job_id}/logs/part", self.api_log_part),
            Route("/api/jobs/{job_id}/logs/search", self.api_log_search),
            Route("/api/jobs/{job_id}/logs/download", self.api_log_download),
            Route("/api/jobs/{job_id}/outputs/{path:path}", self.api_output),
            Route("/api/jobs/{job_id}/cancel", self.api_cancel_job, methods=["POST"]),
            Route("/api/batches", self.api_batches),
            Route("/api/batches/{group_id}", self.api_batch),
            Route("/api/batches/{group_id}/cancel", self.api_cancel_batch, methods=["POST"]),
            Route("/api/usage", self.api_usage),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]

    # ---- pages ------------------------------------------------------------------------
    def jobs_page(self, request: Request) -> Response:
        filters = _job_filters(request, strict=False)
        try:
            checked = _job_filters(request)
            listing = self._listing(request, checked)
        except kc.ConfigError as exc:  # the form stays, with what is wrong
            body = pages.jobs_page(self.base(request), _NOTHING, filters, error=str(exc))
            data = {"filters": filters, "error": str(exc)}
            return self._html(request, "Jobs", body, "jobs", data, status=400)
        body = pages.jobs_page(self.base(request), listing, checked)
        return self._html(request, "Jobs", body, "jobs", {"filters": checked})

    def _listing(self, request: Request, filters: dict[str, Any]) -> dict[str, Any]:
        listing = self.reader_for(request).jobs(**_listing_args(filters))
        if filters["sort"]:
            listing["jobs"] = sort_rows(listing["jobs"], filters["sort"], filters["order"] == "asc")
        return listing

    def job_page(self, request: Request) -> Response:
        job = self.reader_for(request).job(request.path_params["job_id"])
        body = pages.job_page(self.base(request), job, self.allow_actions)
        data = {"job_id": job["job_id"], "workers": job["workers"], "job": job}
        return self._html(request, job["name"] or job["job_id"], body, "job", data)

    def batches_page(self, request: Request) -> Response:
        listing = self.reader_for(request).batches(_limit(request))
        body = pages.batches_page(self.base(request), listing)
        return self._html(request, "Batches", body, "batches", {})

    def batch_page(self, request: Request) -> Response:
        batch = self.reader_for(request).batch(request.path_params["group_id"])
        body = pages.batch_page(self.base(request), batch, self.allow_actions)
        data = {"group_id": batch["group_id"], "finished": batch["done"] >= batch["total"]}
        return self._html(request, batch["name"], body, "batch", data)

    def usage_page(self, request: Request) -> Response:
        filters = {
            "since": request.query_params.get("since") or "7d",
            "tag": request.query_params.get("tag") or "",
        }
        try:
            usage = self.reader_for(request).usage(
                since=filters["since"], tags=_tags(filters["tag"])
            )
        except kc.ConfigError as exc:  # the form stays, with what is wrong
            body = pages.usage_page(None, filters, error=str(exc))
            return self._html(request, "Usage", body, "usage", {"filters": filters}, status=400)
        body = pages.usage_page(usage, filters)
        return self._html(request, "Usage", body, "usage", {"usage": usage, "filters": filters})

    def favicon(self, request: Request) -> Response:
        return Response((STATIC / "favicon.svg").read_bytes(), media_type="image/svg+xml")

    def _html(
        self,
        request: Request,
        title: str,
        body: str,
        view: str,
        data: dict[str, Any],
        status: int = 200,
    ) -> HTMLResponse:
        data = {**data, "actions": self.allow_actions}
        html = pages.page(self.base(request), title, body, view=view, data=data)
        return HTMLResponse(html, status_code=status)

    # ---- JSON -------------------------------------------------------------------------
    def api_jobs(self, request: Request) -> Response:
        return JSONResponse(self._listing(request, _job_filters(request)))

    def api_job(self, request: Request) -> Response:
        return JSONResponse(self.reader_for(request).job(request.path_params["job_id"]))

    def api_logs(self, request: Request) -> Response:
        return JSONResponse(
            self.reader_for(request).logs(
                request.path_params["job_id"],
                request.query_params.get("cursor"),
                _number(request, "worker"),
                _number(request, "attempt"),
            )
        )

    def api_log_part(self, request: Request) -> Response:
        which = request.query_params.get("part") or "last"
        return JSONResponse(
            self.reader_for(request).log_part(
                request.path_params["job_id"],
                _number(request, "attempt"),
                _number(request, "worker"),
                None if which == "last" else _number(request, "part"),
                _number(request, "offset") or 0,
            )
        )

    def api_log_search(self, request: Request) -> Response:
        return JSONResponse(
            self.reader_for(request).log_search(
                request.path_params["job_id"],
                _number(request, "attempt"),
                _number(request, "worker"),
                request.query_params.get("q") or "",
            )
        )

    def api_log_download(self, request: Request) -> Response:
        name, chunks = self.reader_for(request).log_download(
            request.path_params["job_id"], _number(request, "attempt"), _number(request, "worker")
        )
        disposition = f"attachment; filename*=UTF-8''{quote(name)}"
        return StreamingResponse(
            chunks,
            media_type="text/plain; charset=utf-8",
            headers={"Content-Disposition": disposition, "X-Content-Type-Options": "nosniff"},
        )

    def api_output(self, request: Request) -> Response:
        name, chunks = self.reader_for(request).open_output(
            request.path_params["job_id"], request.path_params["path"]
        )
        disposition = f"attachment; filename*=UTF-8''{quote(name)}"
        return StreamingResponse(
            chunks,
            media_type="application/octet-stream",
            headers={"Content-Disposition": disposition, "X-Content-Type-Options": "nosniff"},
        )

    def api_batches(self, request: Request) -> Response:
        return JSONResponse(self.reader_for(request).batches(_limit(request)))

    def api_batch(self, request: Request) -> Response:
        return JSONResponse(self.reader_for(request).batch(request.path_params["group_id"]))

    def api_usage(self, request: Request) -> Response:
        since = request.query_params.get("since") or "7d"
        tags = _tags(request.query_params.get("tag") or "")
        return JSONResponse(self.reader_for(request).usage(since=since, tags=tags))

    # ---- actions ----------------------------------------------------------------------
    def _refused(self, request: Request) -> Response | None:
        if not self.allow_actions:
            return JSONResponse(
                {"error": "this dashboard is read-only: start it with --allow-actions to act"},
                status_code=403,
            )
        why = action_allowed(request.scope)
        return JSONResponse({"error": why}, status_code=403) if why else None

    def api_cancel_job(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        return JSONResponse(self.reader_for(request).cancel_job(request.path_params["job_id"]))

    def api_cancel_batch(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        return JSONResponse(self.reader_for(request).cancel_batch(request.path_params["group_id"]))


# ---- request parsing ----------------------------------------------------------------------
def _job_filters(request: Request, *, strict: bool = True) -> dict[str, Any]:
    """The jobs list's filters; ``strict`` False: as given, unchecked (to show them again
    in the form beside what is wrong with them)."""
    q = request.query_params
    sort = q.get("sort") or ""
    if strict and sort and sort not in SORTS:
        raise kc.ConfigError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}.")
    return {
        "status": (q.get("status") or "").upper(),
        "tag": q.get("tag") or "",
        "name": q.get("name") or "",
        "since": q.get("since") or "",
        "until": q.get("until") or "",
        "limit": _limit(request) if strict else q.get("limit") or "",
        "all": "1" if (q.get("all") or "").lower() in ("1", "true", "on", "yes") else "",
        "sort": sort,
        "order": "asc" if q.get("order") == "asc" else "",
    }


def _listing_args(filters: dict[str, Any]) -> dict[str, Any]:
    return {
        "statuses": [filters["status"]] if filters["status"] else None,
        "tags": _tags(filters["tag"]),
        "name": filters["name"] or None,
        "since": filters["since"] or None,
        "until": filters["until"] or None,
        "limit": filters["limit"],
        "every_job": bool(filters["all"]),
    }


def _number(request: Request, name: str) -> int | None:
    """A whole-number query parameter (None when absent); ConfigError otherwise."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 12:
        raise kc.ConfigError(f"{name} must be a whole number >= 0, got {raw!r}.")
    return int(raw)


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise kc.ConfigError(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {raw!r}.")
    return int(raw)


def _tags(text: str) -> dict[str, str]:
    """``key=value`` (several separated by commas) as a dict; ConfigError otherwise."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise kc.ConfigError(f"tag {part!r} is not KEY=VALUE (for example: team=ml).")
        out[key.strip()] = value.strip()
    return out


# ---- errors -------------------------------------------------------------------------------
def _status_of(exc: kc.KineticError) -> int:
    if isinstance(exc, kc.InvalidIdError | kc.ConfigError):
        return 400
    if isinstance(exc, kc.JobNotFound | NotFound):
        return 404
    if isinstance(exc, kc.PermissionDenied):
        return 403
    return 500


def _error_handler(dashboard: Dashboard) -> Callable[[Request, Exception], Awaitable[Response]]:
    """A KineticError as JSON under /api/, as a small page (escaped) elsewhere."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, kc.KineticError)
        status = _status_of(exc)
        if "/api/" in request.url.path:
            return JSONResponse({"error": str(exc), "type": type(exc).__name__}, status)
        body = pages.not_found(str(exc)) if status == 404 else f"<p>{pages.text(exc)}</p>"
        html = pages.page(dashboard.base(request), "Error", body, view="error", data={})
        return HTMLResponse(html, status_code=status)

    return handle


def build(
    storage: str | None,
    *,
    token: str | None,
    allow_actions: bool,
    root_path: str,
    readable: Readable | None = None,
) -> Starlette:
    dashboard = Dashboard(
        Reader.of(storage), allow_actions=allow_actions, root_path=root_path, readable=readable
    )
    middleware = [Middleware(TokenGate, token=token, cookie_path=root_path or "/")] if token else []
    app = Starlette(
        routes=dashboard.routes(),
        middleware=middleware,
        exception_handlers={kc.KineticError: _error_handler(dashboard)},
    )
    app.state.dashboard = dashboard
    return app
