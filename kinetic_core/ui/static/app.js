// kinetic dashboard: keeps the server-rendered pages live (JSON API every 2 s), follows
// logs with the cursor API and draws the timeline and usage charts as inline SVG.
// No framework, no network beyond this server; every URL starts at the app's base path.
(function () {
  "use strict";
  var body = document.body;
  var BASE = body.getAttribute("data-base") || "";
  var VIEW = body.getAttribute("data-view") || "";
  var PAGE = {};
  try { PAGE = JSON.parse(body.getAttribute("data-page") || "{}"); } catch (e) { PAGE = {}; }
  var EVERY = 2000;
  var SVG = "http://www.w3.org/2000/svg";
  var TERMINAL = { SUCCEEDED: 1, FAILED: 1, CANCELLED: 1, NOT_FOUND: 1 };
  var COLORS = {
    PENDING: "#c8a200", RUNNING: "#2f6fdf", SUCCEEDED: "#2e9b4e", FAILED: "#d23b3b",
    CANCELLED: "#8a8a8a", NOT_FOUND: "#b0b0b0", SUBMIT_FAILED: "#a0522d", UNSUBMITTED: "#dddddd"
  };

  function api(path) {
    return fetch(BASE + path, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error(path + ": HTTP " + r.status); }
        return r.json();
      });
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = String(text); }
    return node;
  }

  // text a job wrote, isolated: a right-to-left override in it turns nothing around it
  function bidi(text) { return el("bdi", {}, text); }

  // a tooltip cannot hold a <bdi>: drop the direction controls from text a job wrote
  function unbidi(text) { return String(text).replace(/[\u202a-\u202e\u2066-\u2069]/g, ""); }

  function badge(status) { return el("span", { "class": "badge s-" + status }, status); }

  function ago(iso) {
    if (!iso) { return ""; }
    var s = (Date.now() - Date.parse(iso)) / 1000;
    if (s < 60) { return Math.max(0, Math.round(s)) + "s ago"; }
    if (s < 3600) { return Math.round(s / 60) + "m ago"; }
    if (s < 86400) { return Math.round(s / 3600) + "h ago"; }
    return Math.round(s / 86400) + "d ago";
  }

  function relativeTimes() {
    document.querySelectorAll("time[datetime]").forEach(function (t) {
      var iso = t.getAttribute("datetime");
      if (iso) { t.textContent = ago(iso); t.title = iso; }
    });
  }

  function every(fn) {
    var timer = null;
    function tick() {
      Promise.resolve(fn()).then(function (again) {
        if (again !== false) { timer = setTimeout(tick, EVERY); }
      }, function () { timer = setTimeout(tick, EVERY * 2); });
    }
    timer = setTimeout(tick, EVERY);
    return function () { clearTimeout(timer); };
  }

  // ---- jobs page -------------------------------------------------------------------------
  function jobRow(job) {
    var tr = el("tr", { "data-job-id": job.job_id, "data-status": job.status });
    var link = el("a", { href: BASE + "/jobs/" + encodeURIComponent(job.job_id) }, job.job_id);
    var cells = [link, bidi(job.name), badge(job.status), bidi(job.reason || ""),
      el("time", { datetime: job.created_at || "" }, job.created_at || ""), job.attempt];
    cells.forEach(function (c) {
      var td = el("td");
      if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c; }
      tr.appendChild(td);
    });
    var tags = el("td");
    Object.keys(job.tags || {}).forEach(function (k) {
      tags.appendChild(el("span", { "class": "tag" })).appendChild(bidi(k + "=" + job.tags[k]));
      tags.appendChild(document.createTextNode(" "));
    });
    tr.appendChild(tags);
    return tr;
  }

  // a batch in the jobs table (the server's pages.batch_row): its progress, its page
  function progressBar(batch) {
    var total = Math.max(batch.total || 0, 1);
    var bar = el("div", { "class": "progress", role: "progressbar", "aria-valuemin": "0",
      "aria-valuemax": String(total), "aria-valuenow": String(batch.done) });
    Object.keys(batch.counts || {}).sort().forEach(function (s) {
      var n = batch.counts[s];
      bar.appendChild(el("span", { "class": "seg s-" + s, "data-status": s, title: s + ": " + n,
        style: "width:" + (100 * n / total).toFixed(3) + "%" }));
    });
    return bar;
  }

  function batchRow(batch) {
    var tr = el("tr", { "data-batch-id": batch.batch_id, "class": "batch-row" });
    var link = el("a", { href: BASE + "/batches/" + encodeURIComponent(batch.batch_id) },
      batch.batch_id);
    var name = el("td");
    name.appendChild(bidi(batch.name));
    name.appendChild(document.createTextNode(" "));
    name.appendChild(el("span", { "class": "kind" }, "batch"));
    [link, name, progressBar(batch), batch.done + "/" + batch.total + " done",
      el("time", { datetime: batch.created_at || "" }, batch.created_at || ""), ""].forEach(
      function (c, i) {
        if (i === 1) { tr.appendChild(c); return; }
        var td = el("td");
        if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c; }
        tr.appendChild(td);
      });
    var tags = el("td");
    Object.keys(batch.tags || {}).forEach(function (k) {
      tags.appendChild(el("span", { "class": "tag" })).appendChild(bidi(k + "=" + batch.tags[k]));
      tags.appendChild(document.createTextNode(" "));
    });
    tr.appendChild(tags);
    return tr;
  }

  function jobsPage() {
    var tbody = document.querySelector("#jobs-table tbody");
    if (!tbody) { return; }
    relativeTimes();
    every(function () {
      return api("/api/jobs" + window.location.search).then(function (data) {
        var rows = document.createDocumentFragment();
        data.jobs.forEach(function (j) {
          rows.appendChild(j.kind === "batch" ? batchRow(j) : jobRow(j));
        });
        tbody.replaceChildren(rows);
        tbody.dataset.drawn = "api";
        relativeTimes();
      });
    });
  }

  // ---- one job ---------------------------------------------------------------------------
  function drawTimeline(history, svg) {
    svg.replaceChildren();
    if (!history || !history.length) { return; }
    var width = svg.clientWidth || 800;
    var start = Date.parse(history[0].at);
    var last = history[history.length - 1];
    var end = TERMINAL[last.status] ? Date.parse(last.at) : Date.now();
    var span = Math.max(end - start, 1000);
    var attempts = [];
    history.forEach(function (t) { if (attempts.indexOf(t.attempt) < 0) { attempts.push(t.attempt); } });
    var rowH = Math.max(14, Math.floor(70 / attempts.length));
    svg.setAttribute("height", String(attempts.length * (rowH + 6) + 24));
    history.forEach(function (t, i) {
      var from = Date.parse(t.at);
      var next = history[i + 1];
      var to = next && next.attempt === t.attempt ? Date.parse(next.at)
        : (TERMINAL[t.status] ? from : (next ? Date.parse(next.at) : end));
      var x = 60 + (from - start) / span * (width - 70);
      var w = Math.max(TERMINAL[t.status] ? 3 : 2, (to - from) / span * (width - 70));
      var y = attempts.indexOf(t.attempt) * (rowH + 6) + 4;
      var rect = svgEl("rect", {
        "class": "seg", x: x.toFixed(1), y: y, width: w.toFixed(1), height: rowH,
        fill: COLORS[t.status] || "#999", "data-status": t.status, "data-attempt": t.attempt
      });
      rect.appendChild(svgEl("title", {}, "attempt " + t.attempt + ": " + t.status +
        (t.reason ? " (" + unbidi(t.reason) + ")" : "") + " at " + t.at +
        (t.duration ? " for " + t.duration.toFixed(1) + "s" : "")));
      svg.appendChild(rect);
    });
    attempts.forEach(function (a, k) {
      svg.appendChild(svgEl("text", { x: 0, y: k * (rowH + 6) + 4 + rowH - 3, "class": "label" },
        "attempt " + a));
    });
    var axisY = attempts.length * (rowH + 6) + 18;
    svg.appendChild(svgEl("text", { x: 60, y: axisY, "class": "label" }, history[0].at.replace("T", " ").slice(0, 19)));
    svg.appendChild(svgEl("text", { x: width - 10, y: axisY, "class": "label", "text-anchor": "end" },
      ((end - start) / 1000).toFixed(1) + "s"));
  }

  function drawBars(svg, rows, keys, labelKey) {
    // stacked horizontal-axis bars: one per row, one segment per key (useful, lost)
    svg.replaceChildren();
    var width = svg.clientWidth || 800;
    var height = Number(svg.getAttribute("height")) || 200;
    var max = 0;
    rows.forEach(function (r) {
      var sum = 0; keys.forEach(function (k) { sum += r[k[0]] || 0; });
      max = Math.max(max, sum);
    });
    if (!rows.length) {
      svg.appendChild(svgEl("text", { x: 10, y: 20, "class": "label" }, "no usage recorded"));
      return;
    }
    max = max || 1;
    var slot = Math.min(80, (width - 50) / rows.length);
    var plotH = height - 56;  // below it: the day labels, then the legend, unclipped
    rows.forEach(function (r, i) {
      var y = plotH + 10;
      keys.forEach(function (k) {
        var h = (r[k[0]] || 0) / max * plotH;
        y -= h;
        var rect = svgEl("rect", {
          "class": "bar " + k[0], x: (45 + i * slot + 4).toFixed(1), y: y.toFixed(1),
          width: Math.max(slot - 8, 2).toFixed(1), height: Math.max(h, 0).toFixed(1),
          fill: k[1], "data-key": k[0]
        });
        rect.appendChild(svgEl("title", {}, r[labelKey] + ": " + k[0].replace(/_/g, " ") + " " + (r[k[0]] || 0).toFixed(3)));
        svg.appendChild(rect);
      });
      svg.appendChild(svgEl("text", { x: (45 + i * slot + slot / 2).toFixed(1), y: plotH + 26,
        "class": "label", "text-anchor": "middle" }, String(r[labelKey]).slice(5)));
    });
    svg.appendChild(svgEl("text", { x: 0, y: 14, "class": "label" }, max.toFixed(2)));
    svg.appendChild(svgEl("text", { x: 0, y: plotH + 10, "class": "label" }, "0"));
    var legend = 45;
    keys.forEach(function (k) {
      svg.appendChild(svgEl("rect", { x: legend, y: height - 15, width: 8, height: 8, fill: k[1] }));
      svg.appendChild(svgEl("text", { x: legend + 12, y: height - 7, "class": "label" }, k[0].replace(/_/g, " ")));
      legend += 150;
    });
  }

  var USAGE_KEYS = [["useful_chip_hours", "#2e9b4e"], ["lost_chip_hours", "#d23b3b"]];

  function drawJobUsage(usage, svg) {
    svg.replaceChildren();
    if (!usage) { svg.setAttribute("height", "0"); return; }
    var width = svg.clientWidth || 800;
    var total = (usage.useful_chip_hours || 0) + (usage.lost_chip_hours || 0);
    var x = 0;
    USAGE_KEYS.forEach(function (k) {
      var w = total ? (usage[k[0]] || 0) / total * width : 0;
      var rect = svgEl("rect", { "class": "bar " + k[0], x: x, y: 4, width: w.toFixed(1), height: 20, fill: k[1], "data-key": k[0] });
      rect.appendChild(svgEl("title", {}, k[0].replace(/_/g, " ") + ": " + (usage[k[0]] || 0).toFixed(3)));
      svg.appendChild(rect);
      x += w;
    });
    if (!total) { svg.appendChild(svgEl("text", { x: 4, y: 18, "class": "label" }, "0 chip-hours")); }
  }

  function followLogs(jobId) {
    var pre = document.getElementById("logs");
    var select = document.getElementById("worker-select");
    var follow = document.getElementById("follow");
    var cursor = null;
    var generation = 0;
    function read(gen) {
      var q = "?";
      if (cursor) { q += "cursor=" + encodeURIComponent(cursor) + "&"; }
      if (select && select.value !== "") { q += "worker=" + encodeURIComponent(select.value); }
      return api("/api/jobs/" + encodeURIComponent(jobId) + "/logs" + q).then(function (data) {
        if (gen !== generation) { return true; }
        cursor = data.cursor;
        if (data.text) {
          pre.appendChild(document.createTextNode(data.text));
          if (!follow || follow.checked) { pre.scrollTop = pre.scrollHeight; }
        }
        pre.setAttribute("data-status", data.status);
        if (data.done && !data.text) { pre.setAttribute("data-done", "true"); return false; }
        return data.text ? "more" : true;
      });
    }
    function loop(gen) {
      read(gen).then(function (again) {
        if (gen !== generation || again === false) { return; }
        setTimeout(function () { loop(gen); }, again === "more" ? 50 : EVERY);
      }, function () { setTimeout(function () { loop(gen); }, EVERY * 2); });
    }
    if (select) {
      select.addEventListener("change", function () {
        generation += 1; cursor = null; pre.replaceChildren(); pre.removeAttribute("data-done");
        loop(generation);
      });
    }
    loop(generation);
  }

  function renderJob(job) {
    var state = document.getElementById("job-state");
    if (state) {
      state.setAttribute("data-status", job.state.status);
      var detail = el("span", { "class": "reason" });
      [job.state.reason, job.state.message].filter(Boolean).forEach(function (part, i) {
        if (i) { detail.appendChild(document.createTextNode(" · ")); }
        detail.appendChild(bidi(part));
      });
      if (job.state.exit_code !== null && job.state.exit_code !== undefined) {
        detail.appendChild(document.createTextNode(" · exit code " + job.state.exit_code));
      }
      state.replaceChildren(badge(job.state.status), document.createTextNode(" "), detail);
    }
    drawTimeline(job.history, document.getElementById("timeline"));
    var chart = document.getElementById("usage-chart");
    if (chart) { drawJobUsage(job.usage, chart); }
    var cancel = document.getElementById("cancel-job");
    if (cancel && TERMINAL[job.state.status]) { cancel.remove(); }
  }

  function renderEnd(job) {
    // the job ended while the page was open: fill what only an ended job has, no reload
    var outcome = document.getElementById("outcome");
    if (outcome && job.outcome) {
      var kind = job.outcome.kind;
      var node = kind === "cancelled" ? el("p", { "class": "cancelled" }, job.outcome.text)
        : el("pre", { "class": kind === "result" ? "result" : "traceback" }, job.outcome.text);
      outcome.replaceChildren(node);
    }
    var outputs = document.getElementById("outputs");
    if (outputs && job.outputs && job.outputs.length) {
      var list = el("ul", { "class": "outputs" });
      job.outputs.forEach(function (o) {
        var href = BASE + "/api/jobs/" + encodeURIComponent(job.job_id) + "/outputs/" +
          o.path.split("/").map(encodeURIComponent).join("/");
        var item = el("li");
        item.appendChild(el("a", { href: href, download: "" }, o.path));
        list.appendChild(item);
      });
      outputs.replaceChildren(list);
    }
    var usage = document.getElementById("usage");
    if (usage && job.usage) {
      var table = el("table", { "class": "kv" });
      Object.keys(job.usage).forEach(function (k) {
        var v = job.usage[k];
        if (v !== null && typeof v === "object") { return; }
        var row = el("tr");
        row.appendChild(el("th", {}, k.replace(/_/g, " ")));
        row.appendChild(el("td", {}, typeof v === "number" ? String(Math.round(v * 1000) / 1000) : v));
        table.appendChild(row);
      });
      usage.replaceChildren(table);
    }
  }

  function jobPage() {
    var jobId = PAGE.job_id;
    if (!jobId) { return; }
    renderJob(PAGE.job);
    followLogs(jobId);
    var reloaded = TERMINAL[PAGE.job.state.status];
    if (!reloaded) {
      every(function () {
        return api("/api/jobs/" + encodeURIComponent(jobId)).then(function (job) {
          renderJob(job);
          if (TERMINAL[job.state.status]) { renderEnd(job); return false; }
          return true;
        });
      });
    }
    action("cancel-job", "/api/jobs/" + encodeURIComponent(jobId) + "/cancel");
  }

  function action(id, path) {
    var button = document.getElementById(id);
    if (!button) { return; }
    button.addEventListener("click", function () {
      if (!window.confirm(button.textContent + "?")) { return; }
      button.disabled = true;
      fetch(BASE + path, { method: "POST", credentials: "same-origin", headers: { "X-Kinetic-Action": "1" } })
        .then(function (r) { return r.json().then(function (d) { if (!r.ok) { throw new Error(d.error); } }); })
        .then(function () { window.location.reload(); }, function (e) { button.disabled = false; window.alert(e.message); });
    });
  }

  // ---- batches ---------------------------------------------------------------------------
  function batchPage() {
    var groupId = PAGE.group_id;
    if (!groupId) { return; }
    action("cancel-batch", "/api/batches/" + encodeURIComponent(groupId) + "/cancel");
    // a finished batch changes no more: nothing to follow (a reload would close what the
    // reader opened); one that finishes while open is reloaded once, finished
    if (PAGE.finished) { return; }
    every(function () {
      return api("/api/batches/" + encodeURIComponent(groupId)).then(function (b) {
        var bar = document.getElementById("batch-progress");
        if (bar) {
          bar.replaceChildren();
          Object.keys(b.counts).sort().forEach(function (s) {
            bar.appendChild(el("span", { "class": "seg s-" + s, "data-status": s, title: s + ": " + b.counts[s],
              style: "width:" + (100 * b.counts[s] / Math.max(b.total, 1)).toFixed(3) + "%" }));
          });
          bar.setAttribute("aria-valuenow", String(b.done));
        }
        b.children.forEach(function (c) {
          var row = document.querySelector('#children-table tr[data-index="' + c.index + '"]');
          if (row && row.getAttribute("data-status") !== c.status) {
            row.setAttribute("data-status", c.status);
            row.cells[2].replaceChildren(badge(c.status));
          }
        });
        if (b.done >= b.total) { window.location.reload(); return false; }
        return true;
      });
    });
  }

  // ---- usage -----------------------------------------------------------------------------
  function usagePage() {
    var svg = document.getElementById("usage-chart");
    if (svg && PAGE.usage) { drawBars(svg, PAGE.usage.days, USAGE_KEYS, "day"); }
  }

  function start() {
    if (VIEW === "jobs") { jobsPage(); }
    else if (VIEW === "job") { jobPage(); }
    else if (VIEW === "batch") { batchPage(); }
    else if (VIEW === "usage") { usagePage(); }
    else { relativeTimes(); }
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); }
  else { start(); }
})();
