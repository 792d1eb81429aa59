"""The dashboard's HTML, rendered on the server from ``views`` data.

Every value is escaped (``esc``), and text a job wrote is isolated as well (``text``:
``<bdi>``); every link starts with the app's base path, so the
pages work at ``/`` and mounted under another app (Airflow's ``/kinetic``). The first
paint is complete without JavaScript; ``static/app.js`` then keeps it live and draws
the charts. Element ids the browser tests rely on: ``#jobs-table`` (rows
``tr[data-job-id]`` and ``tr[data-batch-id]``), ``#job-state``, ``#timeline``, ``#logs``, ``#worker-select``,
``#usage-chart``, ``#batch-progress``.
"""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import quote, urlencode

import kinetic_core as kc

STATUSES = [s.value for s in kc.JobStatus]


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def text(value: Any) -> str:
    """Text a job wrote (a name, message, tag, path), escaped and isolated: a right-to-left
    override in it turns no text of the page around it ("1 edoc tixe")."""
    shown = esc(value)
    return f"<bdi>{shown}</bdi>" if shown else ""


def tag_html(key: Any, value: Any) -> str:
    return f'<span class="tag">{text(f"{key}={value}")}</span>'


def page(base: str, title: str, body: str, *, view: str, data: dict[str, Any]) -> str:
    """The layout around one page; ``data`` reaches app.js as JSON in a data attribute."""
    nav = "".join(
        f'<a href="{esc(base)}{href}" class="{"on" if view.startswith(key) else ""}">{label}</a>'
        for key, href, label in (
            ("job", "/", "Jobs"),
            ("batch", "/batches", "Batches"),
            ("usage", "/usage", "Usage"),
        )
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · kinetic</title>"
        f'<link rel="stylesheet" href="{esc(base)}/static/app.css">'
        f'<link rel="icon" type="image/svg+xml" href="{esc(base)}/static/favicon.svg">'
        f'</head><body data-base="{esc(base)}" data-view="{esc(view)}" '
        f"data-page='{esc(json.dumps(data))}'>"
        f'<header><a class="brand" href="{esc(base)}/">kinetic</a><nav>{nav}</nav></header>'
        f"<main>{body}</main>"
        f'<script src="{esc(base)}/static/app.js"></script>'
        "</body></html>"
    )


def badge(status: str | None) -> str:
    return f'<span class="badge s-{esc(status)}">{esc(status)}</span>'


def job_link(base: str, job_id: str) -> str:
    return f'<a href="{esc(base)}/jobs/{quote(job_id)}">{esc(job_id)}</a>'


# ---- jobs -------------------------------------------------------------------------------------
#: The jobs table's columns: (label, the ``sort`` key it orders by, shown on a phone).
JOB_COLUMNS = (
    ("Job", None, True),
    ("Name", "name", True),
    ("Status", "status", True),
    ("Reason", None, False),
    ("Created", "created", False),
    ("Ended", "ended", False),
    ("Duration", "duration", True),
    ("Attempt", None, False),
    ("Tags", None, False),
)


def _opt(shown_on_phone: bool) -> str:
    return "" if shown_on_phone else ' class="opt"'


def jobs_head(base: str, filters: dict[str, Any]) -> str:
    """The header row; a sortable column's label links to the page sorted by it (again:
    the other way round)."""
    cells = []
    for label, key, phone in JOB_COLUMNS:
        if key is None:
            cells.append(f"<th{_opt(phone)}>{label}</th>")
            continue
        on = filters.get("sort") == key
        asc = on and filters.get("order") != "asc"
        query = {k: v for k, v in filters.items() if v and k not in ("sort", "order", "until")}
        query |= {"sort": key} | ({"order": "asc"} if asc else {})
        arrow = (" ▲" if filters.get("order") == "asc" else " ▼") if on else ""
        cells.append(
            f'<th{_opt(phone)}><a class="sort" data-sort="{key}" '
            f'href="{esc(base)}/?{esc(urlencode(query))}">{label}{arrow}</a></th>'
        )
    return "<tr>" + "".join(cells) + "</tr>"


def duration_text(seconds: Any) -> str:
    """``4.2s``, ``3m 05s``, ``2h 10m``; empty for None."""
    if not isinstance(seconds, int | float):
        return ""
    s = float(seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m {int(s % 60):02d}s"
    return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m"


def jobs_page(
    base: str, listing: dict[str, Any], filters: dict[str, Any], error: str | None = None
) -> str:
    status_options = '<option value="">any status</option>' + "".join(
        f"<option{' selected' if filters.get('status') == s else ''}>{s}</option>" for s in STATUSES
    )
    form = (
        '<form id="filters" class="filters" method="get">'
        f'<select name="status">{status_options}</select>'
        f'<input name="tag" placeholder="tag key=value" value="{esc(filters.get("tag"))}">'
        f'<input name="name" placeholder="name" value="{esc(filters.get("name"))}">'
        f'<input name="since" placeholder="since: 2h, 7d, 2026-11-25" '
        f'value="{esc(filters.get("since"))}">'
        '<label title="batch children and batch driver jobs as rows of their own">'
        f'<input type="checkbox" name="all" value="1"{" checked" if filters.get("all") else ""}>'
        " all jobs</label>"
        f'<input type="hidden" name="sort" value="{esc(filters.get("sort"))}">'
        '<button type="submit">Filter</button></form>'
    )
    if error is not None:
        form += f'<p class="error" id="filter-error" role="alert">{text(error)}</p>'
    rows = "".join(
        batch_row(base, j) if j.get("kind") == "batch" else job_row(base, j)
        for j in listing["jobs"]
    )
    table = (
        f'<div class="table-wrap"><table id="jobs-table"><thead>{jobs_head(base, filters)}'
        f"</thead><tbody>{rows}</tbody></table></div>"
    )
    empty = "" if listing["jobs"] or error else '<p class="empty">No jobs match.</p>'
    older = ""
    if listing.get("next_until"):
        query = {k: v for k, v in filters.items() if v} | {"until": listing["next_until"]}
        older = f'<p><a id="older" href="{esc(base)}/?{esc(urlencode(query))}">Older jobs →</a></p>'
    return f"<h1>Jobs</h1>{form}{table}{empty}{older}"


def when_html(iso: Any) -> str:
    return f'<time datetime="{esc(iso)}">{esc(iso)}</time>' if iso else ""


def job_row(base: str, job: dict[str, Any]) -> str:
    tags = " ".join(tag_html(k, v) for k, v in job["tags"].items())
    running = job["status"] == "RUNNING" and job.get("started_at")
    since = f' data-running-since="{esc(job["started_at"])}"' if running else ""
    return (
        f'<tr data-job-id="{esc(job["job_id"])}" data-status="{esc(job["status"])}">'
        f'<td class="id">{job_link(base, job["job_id"])}</td><td class="name">{text(job["name"])}</td>'
        f'<td>{badge(job["status"])}</td><td class="opt">{text(job["reason"])}</td>'
        f'<td class="opt">{when_html(job["created_at"])}</td>'
        f'<td class="opt">{when_html(job.get("finished_at"))}</td>'
        f'<td class="duration"{since}>{esc(duration_text(job.get("duration")))}</td>'
        f'<td class="opt">{esc(job["attempt"])}</td><td class="opt">{tags}</td></tr>'
    )


def batch_row(base: str, batch: dict[str, Any]) -> str:
    """A batch in the jobs table: one row for all its children (and its driver job),
    with its progress; the link leads to the batch's page."""
    tags = " ".join(tag_html(k, v) for k, v in batch["tags"].items())
    href = f"{esc(base)}/batches/{quote(batch['batch_id'])}"
    return (
        f'<tr data-batch-id="{esc(batch["batch_id"])}" class="batch-row">'
        f'<td class="id"><a href="{href}">{esc(batch["batch_id"])}</a></td>'
        f"<td class='name'>{text(batch['name'])} <span class='kind'>batch</span></td>"
        f"<td>{progress_bar(batch, element_id=None)}</td>"
        f'<td class="opt">{esc(batch["done"])}/{esc(batch["total"])} done</td>'
        f'<td class="opt">{when_html(batch["created_at"])}</td>'
        f'<td class="opt"></td><td></td><td class="opt"></td><td class="opt">{tags}</td></tr>'
    )


# ---- one job ----------------------------------------------------------------------------------
def job_page(base: str, job: dict[str, Any], allow_actions: bool) -> str:
    state = job["state"]
    cancel = ""
    if allow_actions and not kc.JobStatus(state["status"]).terminal:
        cancel = '<button id="cancel-job" class="danger">Cancel job</button>'
    workers = ""
    if job["workers"] > 1:
        options = '<option value="">all workers</option>' + "".join(
            f'<option value="{k}">worker {k}</option>' for k in range(job["workers"])
        )
        workers = f'<select id="worker-select">{options}</select>'
    batch = ""
    if job.get("group_id"):
        batch = (
            f"<p>Child {esc(job.get('index'))} of batch "
            f'<a href="{esc(base)}/batches/{quote(job["group_id"])}">{esc(job["group_id"])}</a></p>'
        )
    return (
        f"<h1>{text(job['name'] or job['job_id'])} <small>{esc(job['job_id'])}</small></h1>"
        f"{batch}"
        f'<section class="summary"><div id="job-state" data-status="{esc(state["status"])}">'
        f"{state_text(state)}</div>{elapsed_html(state)}{cancel}"
        f'<p class="note">{text(job["recovery_note"])}</p>'
        f"<p>{text(job['description'])}</p></section>"
        '<h2>Timeline</h2><svg id="timeline" role="img" aria-label="state timeline" '
        'width="100%" height="90"></svg>'
        f"<h2>Logs</h2>{log_html(base, job, workers)}"
        f'<h2>Outcome</h2><div id="outcome">{outcome_html(job["outcome"])}</div>'
        f'<h2>Outputs</h2><div id="outputs">{outputs_html(base, job)}</div>'
        f'<h2>Usage</h2><div id="usage">{usage_html(job["usage"])}</div>'
        '<svg id="usage-chart" role="img" aria-label="chip-hours" width="100%" height="40"></svg>'
        f'<h2>Links</h2><div id="links">{links_html(job["links"])}</div>'
        f"<h2>Details</h2>{details_html(job)}"
    )


def attempts_select(job: dict[str, Any]) -> str:
    """The attempt whose log is shown: the latest (followed across a recovery) or one
    picked; hidden until the job has a second attempt."""
    attempts = job.get("attempts") or []
    latest = attempts[-1]["attempt"] if attempts else 1
    options = f'<option value="" selected>latest (attempt {esc(latest)})</option>' + "".join(
        f'<option value="{esc(a["attempt"])}" data-attempt-option="{esc(a["attempt"])}">'
        f"attempt {esc(a['attempt'])}</option>"
        for a in attempts
    )
    hidden = "" if len(attempts) > 1 else " hidden"
    return f'<select id="attempt-select"{hidden}>{options}</select>'


def log_html(base: str, job: dict[str, Any], workers: str) -> str:
    """The log box and its bar: the attempt and worker, follow, timestamps (shown once the
    log has them), search, download, and the buttons that page through it (app.js)."""
    download = f"{base}/api/jobs/{quote(job['job_id'])}/logs/download"
    return (
        f'<div class="logbar">{attempts_select(job)}{workers}'
        '<label><input type="checkbox" id="follow" checked> follow</label>'
        '<label id="times-toggle" hidden><input type="checkbox" id="log-times" checked> '
        "timestamps</label>"
        '<form id="log-search-form" class="log-search" role="search">'
        '<input id="log-search" type="search" placeholder="search the whole log" maxlength="200">'
        '<button type="submit">Search</button></form>'
        f'<a id="log-download" href="{esc(download)}" download>download</a></div>'
        '<ol id="log-hits" hidden></ol>'
        '<button id="log-earlier" type="button" hidden>Load earlier</button>'
        '<pre id="logs"></pre>'
        '<button id="log-later" type="button" hidden>Jump to the end</button>'
    )


def elapsed_html(state: dict[str, Any]) -> str:
    """How long the job ran (app.js counts a running job's up every second)."""
    started, finished = state.get("started_at"), state.get("finished_at")
    if not started:
        return '<span id="elapsed"></span>'
    attrs = f' data-started="{esc(started)}"' + (
        f' data-finished="{esc(finished)}"' if finished else ""
    )
    return f'<span id="elapsed"{attrs}></span>'


def state_text(state: dict[str, Any]) -> str:
    detail = " · ".join(text(x) for x in (state.get("reason"), state.get("message")) if x)
    code = state.get("exit_code")
    extra = f" · exit code {esc(code)}" if code is not None else ""
    return f"{badge(state['status'])} <span class='reason'>{detail}{extra}</span>"


def outcome_html(outcome: dict[str, Any] | None) -> str:
    if outcome is None:
        return '<p class="empty">Not finished yet.</p>'
    if outcome["kind"] == "result":
        return f'<pre class="result">{esc(outcome["text"])}</pre>'
    if outcome["kind"] == "cancelled":
        return f'<p class="cancelled">{text(outcome["text"])}</p>'
    return f'<pre class="traceback">{esc(outcome["text"])}</pre>'


def outputs_html(base: str, job: dict[str, Any]) -> str:
    if not job["outputs"]:
        return '<p class="empty">No output files.</p>'
    where = f"{base}/api/jobs/{quote(job['job_id'])}/outputs/"
    items = "".join(
        f'<li><a href="{esc(where)}{esc(quote(o["path"]))}" download>{text(o["path"])}</a></li>'
        for o in job["outputs"]
    )
    return f'<ul class="outputs">{items}</ul>'


def usage_html(usage: dict[str, Any] | None) -> str:
    if not usage:
        return '<p class="empty">No usage recorded.</p>'
    rows = "".join(
        f"<tr><th>{esc(k.replace('_', ' '))}</th><td>{esc(_num(v))}</td></tr>"
        for k, v in usage.items()
        if v is not None and not isinstance(v, dict | list)
    )
    if usage.get("cost") is None:  # say why there is no cost, and how to have one
        rows += (
            "<tr><th>cost</th><td class='empty'>no price table is set: give one as "
            "Target(prices=...) or KINETIC_PRICES (see the usage docs)</td></tr>"
        )
    return f'<table class="kv">{rows}</table>'


def links_html(links: dict[str, str]) -> str:
    if not links:
        return '<p class="empty">No web pages for this job.</p>'
    return "".join(
        f'<a class="ext" href="{esc(url)}" rel="noopener noreferrer" target="_blank">{esc(kind)}</a> '
        for kind, url in links.items()
        if url.startswith(("http://", "https://"))
    )


def details_html(job: dict[str, Any]) -> str:
    fields = {
        "owner": job["owner"],
        "created": job["created_at"],
        "started": job["state"].get("started_at"),
        "finished": job["state"].get("finished_at"),
        "attempt": job["state"].get("attempt"),
        "backend": job["backend"],
        "accelerator": job["accelerator"],
        "workers": job["workers"],
        "storage": job["location"],
        "idempotency key": job["idempotency_key"],
        "tags": ", ".join(f"{k}={v}" for k, v in job["tags"].items()),
        "target": json.dumps(job["target"], sort_keys=True),
    }
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{text(v)}</td></tr>"
        for k, v in fields.items()
        if v not in (None, "")
    )
    return f'<table class="kv">{rows}</table>'


# ---- batches ----------------------------------------------------------------------------------
def batches_page(base: str, listing: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr data-group-id="{esc(b["group_id"])}">'
        f'<td><a href="{esc(base)}/batches/{quote(b["group_id"])}">{esc(b["group_id"])}</a></td>'
        f"<td>{text(b['name'])}</td><td>{progress_bar(b, element_id=None)}</td>"
        f"<td>{esc(b['done'])}/{esc(b['total'])}</td><td>{esc(b['created_at'])}</td></tr>"
        for b in listing["batches"]
    )
    empty = "" if listing["batches"] else '<p class="empty">No batches.</p>'
    return (
        '<h1>Batches</h1><table id="batches-table"><thead><tr><th>Batch</th><th>Name</th>'
        f"<th>Progress</th><th>Done</th><th>Created</th></tr></thead><tbody>{rows}</tbody>"
        f"</table>{empty}"
    )


def progress_bar(batch: dict[str, Any], element_id: str | None = "batch-progress") -> str:
    """A bar of one segment per child status, widths in proportion."""
    total = max(int(batch["total"]), 1)
    segments = "".join(
        f'<span class="seg s-{esc(s)}" data-status="{esc(s)}" title="{esc(s)}: {n}" '
        f'style="width:{100 * n / total:.3f}%"></span>'
        for s, n in sorted(batch["counts"].items())
    )
    ident = f' id="{element_id}"' if element_id else ""
    return (
        f'<div{ident} class="progress" role="progressbar" aria-valuemin="0" '
        f'aria-valuemax="{total}" aria-valuenow="{esc(batch["done"])}">{segments}</div>'
    )


def batch_page(base: str, batch: dict[str, Any], allow_actions: bool) -> str:
    counts = " ".join(f"{badge(s)} {n}" for s, n in sorted(batch["counts"].items()))
    cancel = ""
    if allow_actions and batch["done"] < batch["total"] and not batch["cancel_requested"]:
        cancel = '<button id="cancel-batch" class="danger">Cancel batch</button>'
    children = "".join(
        f'<tr data-index="{c["index"]}" data-status="{esc(c["status"])}"><td>{c["index"]}</td>'
        f"<td>{job_link(base, c['job_id']) if c['job_id'] else '-'}</td>"
        f"<td>{badge(c['status'])}</td></tr>"
        for c in batch["children"]
    )
    failed = "".join(
        f'<details class="failed" data-index="{f["index"]}"><summary>child {f["index"]} '
        f"{badge(f['status'])} {text(f['reason'])}</summary>"
        f'<pre class="traceback">{esc(f["error"])}</pre></details>'
        for f in batch["failed"]
    )
    return (
        f"<h1>{text(batch['name'])} <small>{esc(batch['group_id'])}</small></h1>"
        f"{progress_bar(batch)}<p id='batch-counts'>{counts} · {batch['done']}/{batch['total']} "
        f"done</p>{cancel}"
        f"<h2>Failed children</h2>{failed or '<p class=empty>None.</p>'}"
        '<h2>Children</h2><table id="children-table"><thead><tr><th>#</th><th>Job</th>'
        f"<th>Status</th></tr></thead><tbody>{children}</tbody></table>"
    )


# ---- usage ------------------------------------------------------------------------------------
def usage_page(
    usage: dict[str, Any] | None, filters: dict[str, Any], error: str | None = None
) -> str:
    form = (
        '<form id="filters" class="filters" method="get">'
        f'<input name="since" placeholder="since: 7d" value="{esc(filters.get("since"))}">'
        f'<input name="tag" placeholder="tag key=value" value="{esc(filters.get("tag"))}">'
        '<button type="submit">Show</button></form>'
    )
    if usage is None:
        error_html = f'<p class="error" id="filter-error" role="alert">{text(error)}</p>'
        return f"<h1>Usage</h1>{form}{error_html}"
    if not usage["available"]:
        note = '<p class="empty">No usage recorded for these jobs.</p>'
    else:
        total = usage["total"]
        note = (
            f"<p>{_num(total['chip_hours'])} chip-hours "
            f"({_num(total['useful_chip_hours'])} useful, {_num(total['lost_chip_hours'])} "
            f"lost) · {_num(total['running_hours'])} running hours"
            + (f" · cost {_num(total['cost'])}" if total.get("cost") else "")
            + "</p>"
        )
    tags = "".join(
        f"<tr><td>{text(t['tag'])}</td><td>{_num(t['chip_hours'])}</td>"
        f"<td>{_num(t['useful_chip_hours'])}</td><td>{_num(t['lost_chip_hours'])}</td>"
        f"<td>{_num(t['running_hours'])}</td></tr>"
        for t in usage["tags"]
    )
    return (
        f"<h1>Usage</h1>{form}{coverage_html(usage)}{note}"
        '<h2>Per day</h2><svg id="usage-chart" role="img" aria-label="usage per day" '
        'width="100%" height="220"></svg>'
        '<h2>Per tag</h2><div class="table-wrap"><table id="usage-tags"><thead><tr><th>Tag</th>'
        "<th>Chip-hours</th><th>Useful</th><th>Lost</th><th>Running hours</th></tr></thead>"
        f"<tbody>{tags}</tbody></table></div>"
    )


def coverage_html(usage: dict[str, Any]) -> str:
    """Which jobs the sums cover: every job created in the period, or (past the limit) the
    newest ones, and from when."""
    covered = usage.get("covered") or {}
    since = covered.get("since")
    period = f"created since {when_html(since)}" if since else "ever created"
    if covered.get("complete", True):
        what = f"All {esc(usage['jobs'])} jobs {period}."
    else:
        what = (
            f"The newest {esc(usage['jobs'])} jobs {period}, back to "
            f"{when_html(covered.get('oldest'))}: the period holds more than "
            f"{esc(covered.get('limit'))} jobs; give a shorter period or a tag for all of them."
        )
    return f'<p id="usage-covers" class="note">{what}</p>'


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") or "0"
    return str(value)


def not_found(message: str) -> str:
    return f'<h1>Not found</h1><p class="error">{text(message)}</p>'
