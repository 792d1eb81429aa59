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
  function duration(seconds) {
    if (seconds === null || seconds === undefined || isNaN(seconds)) { return ""; }
    if (seconds < 60) { return seconds.toFixed(1) + "s"; }
    if (seconds < 3600) { return Math.floor(seconds / 60) + "m " + ("0" + Math.floor(seconds % 60)).slice(-2) + "s"; }
    return Math.floor(seconds / 3600) + "h " + ("0" + Math.floor(seconds % 3600 / 60)).slice(-2) + "m";
  }

  // a running job's duration counts up (the server's is as of its answer)
  function tickDurations() {
    document.querySelectorAll("td.duration[data-running-since]").forEach(function (td) {
      td.textContent = duration((Date.now() - Date.parse(td.getAttribute("data-running-since"))) / 1000);
    });
  }

  function cell(content, cls) {
    var td = el("td", cls ? { "class": cls } : {});
    if (content instanceof Node) { td.appendChild(content); } else { td.textContent = content; }
    return td;
  }

  function when(iso) { return iso ? el("time", { datetime: iso }, iso) : ""; }

  function jobRow(job) {
    var tr = el("tr", { "data-job-id": job.job_id, "data-status": job.status });
    var link = el("a", { href: BASE + "/jobs/" + encodeURIComponent(job.job_id) }, job.job_id);
    var dur = cell(duration(job.duration), "duration");
    if (job.status === "RUNNING" && job.started_at) { dur.setAttribute("data-running-since", job.started_at); }
    [cell(link, "id"), cell(bidi(job.name), "name"), cell(badge(job.status)),
      cell(bidi(job.reason || ""), "opt"), cell(when(job.created_at), "opt"),
      cell(when(job.finished_at), "opt"), dur, cell(String(job.attempt), "opt")].forEach(
      function (td) { tr.appendChild(td); });
    var tags = el("td", { "class": "opt" });
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
    var name = el("td", { "class": "name" });
    name.appendChild(bidi(batch.name));
    name.appendChild(document.createTextNode(" "));
    name.appendChild(el("span", { "class": "kind" }, "batch"));
    [cell(link, "id"), name, cell(progressBar(batch)), cell(batch.done + "/" + batch.total + " done", "opt"),
      cell(when(batch.created_at), "opt"), cell("", "opt"), cell(""), cell("", "opt")].forEach(
      function (td) { tr.appendChild(td); });
    var tags = el("td", { "class": "opt" });
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
    tickDurations();
    setInterval(tickDurations, 1000);
    if (document.getElementById("filter-error")) { return; }  // nothing to refresh
    every(function () {
      return api("/api/jobs" + window.location.search).then(function (data) {
        var rows = document.createDocumentFragment();
        data.jobs.forEach(function (j) {
          rows.appendChild(j.kind === "batch" ? batchRow(j) : jobRow(j));
        });
        tbody.replaceChildren(rows);
        tbody.dataset.drawn = "api";
        relativeTimes();
        tickDurations();
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
    svg.appendChild(svgEl("text", { x: 0, y: 14, "class": "label" }, max < 0.1 ? max.toPrecision(2) : max.toFixed(2)));
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

  // ---- a job's log: parts from the tail (logview.py), bounded DOM, search, download ----
  var MAX_PARTS = 3;  // parts shown at once (each at most 256 KiB of text)
  var STAMP = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?/;

  // text as lines; a line led by a date-time gets it as a span.ts (its local time as a
  // tooltip); ``mark``: the index of a line to wrap in <mark> (a search hit)
  function logText(text, atLineStart, mark) {
    var frag = document.createDocumentFragment();
    var lines = text.split("\n");
    var run = "";
    var stamped = false;
    function flush() { if (run) { frag.appendChild(document.createTextNode(run)); run = ""; } }
    lines.forEach(function (line, i) {
      var end = i < lines.length - 1 ? "\n" : "";
      var start = i > 0 || atLineStart;
      var m = start ? STAMP.exec(line) : null;
      if (i === mark) {
        flush();
        frag.appendChild(el("mark", { id: "log-hit" }, line + end));
        return;
      }
      if (!m) { run += line + end; return; }
      flush();
      stamped = true;
      var when = Date.parse(m[0].replace(" ", "T").replace(",", "."));
      frag.appendChild(el("span", { "class": "ts", title: isNaN(when) ? m[0] : new Date(when).toString() }, m[0]));
      run += line.slice(m[0].length) + end;
    });
    flush();
    return { node: frag, stamped: stamped };
  }

  function logViewer(jobId) {
    var pre = document.getElementById("logs");
    var workerSel = document.getElementById("worker-select");
    var attemptSel = document.getElementById("attempt-select");
    var follow = document.getElementById("follow");
    var earlier = document.getElementById("log-earlier");
    var later = document.getElementById("log-later");
    var download = document.getElementById("log-download");
    var times = document.getElementById("log-times");
    var searchForm = document.getElementById("log-search-form");
    var hitsList = document.getElementById("log-hits");
    var path = "/api/jobs/" + encodeURIComponent(jobId) + "/logs";
    var s = {};

    function reset() {
      s = { gen: (s.gen || 0) + 1, attempt: attemptSel && attemptSel.value !== "" ? Number(attemptSel.value) : null,
        first: null, last: null, lastLen: 0, atEnd: true, lineStart: true };
      pre.replaceChildren();
      ["data-done", "data-attempt", "data-first-part", "data-last-part", "data-parts"].forEach(
        function (a) { pre.removeAttribute(a); });
      earlier.hidden = true; later.hidden = true;
      updateDownload();
    }
    function query(extra) {
      var q = [];
      if (s.attempt !== null) { q.push("attempt=" + s.attempt); }
      if (workerSel && workerSel.value !== "") { q.push("worker=" + encodeURIComponent(workerSel.value)); }
      Object.keys(extra || {}).forEach(function (k) { q.push(k + "=" + encodeURIComponent(extra[k])); });
      return q.length ? "?" + q.join("&") : "";
    }
    function updateDownload() { download.href = BASE + path + "/download" + query(); }
    function marks() {
      pre.setAttribute("data-first-part", String(s.first));
      pre.setAttribute("data-last-part", String(s.last));
      earlier.hidden = !(s.first > 0);
      later.hidden = s.atEnd;
    }
    function partNode(k, text, lineStart, mark) {
      var node = el("span", { "class": "part", "data-part": String(k) });
      var drawn = logText(text, lineStart, mark);
      node.appendChild(drawn.node);
      if (drawn.stamped) { document.getElementById("times-toggle").hidden = false; }
      return node;
    }
    function facts(data) {
      pre.setAttribute("data-status", data.status);
      pre.setAttribute("data-parts", String(data.parts));
      if (data.attempt !== undefined) { pre.setAttribute("data-attempt", String(data.attempt)); }
      if (attemptSel) { syncAttempts(data); }
    }
    function syncAttempts(data) {
      var have = attemptSel.querySelectorAll("option[data-attempt-option]").length;
      (data.attempts || []).slice(have).forEach(function (a) {
        attemptSel.appendChild(el("option", { value: String(a.attempt), "data-attempt-option": String(a.attempt) },
          "attempt " + a.attempt));
      });
      var latest = attemptSel.querySelector('option[value=""]');
      if (latest) { latest.textContent = "latest (attempt " + data.latest + ")"; }
      if ((data.attempts || []).length > 1) { attemptSel.hidden = false; }
    }
    // one step of following: the last part first, then what was added to it, part by part
    function step(gen) {
      var first = s.last === null;
      var url = path + "/part" + (first ? query({ part: "last" }) : query({ part: s.last, offset: s.lastLen }));
      return api(url).then(function (data) {
        if (gen !== s.gen) { return false; }
        if (s.attempt === null || first) { s.attempt = data.attempt; }
        facts(data);
        if (data.parts === 0) {
          return finished(data) ? next(data) : true;
        }
        if (first) { s.first = data.part; s.last = data.part; s.lastLen = 0; }
        if (data.text) {
          var node = pre.lastElementChild;
          if (!node || node.getAttribute("data-part") !== String(s.last)) {
            node = el("span", { "class": "part", "data-part": String(s.last) });
            pre.appendChild(node);
          }
          var drawn = logText(data.text, s.lineStart, -1);
          node.appendChild(drawn.node);
          if (drawn.stamped) { document.getElementById("times-toggle").hidden = false; }
          s.lineStart = data.text.charAt(data.text.length - 1) === "\n";
          s.lastLen += data.text.length;
          if (!follow || follow.checked) { pre.scrollTop = pre.scrollHeight; }
        }
        var grew = false;
        if (s.lastLen >= data.size && data.parts > s.last + 1) {
          s.last += 1; s.lastLen = 0; s.lineStart = true; grew = true;
          while (pre.querySelectorAll("span.part").length >= MAX_PARTS) {
            pre.querySelector("span.part").remove();
            s.first = Number(pre.querySelector("span.part").getAttribute("data-part"));
          }
        }
        marks();
        if (grew || data.text || !data.complete) { return "more"; }
        return finished(data) ? next(data) : true;
      });
    }
    function finished(data) { return data.done && data.complete; }
    // the attempt read has ended: on "latest", a recovery's next attempt follows
    function next(data) {
      var onLatest = !attemptSel || attemptSel.value === "";
      if (onLatest && data.latest > data.attempt) {
        var note = "[kinetic] attempt " + data.attempt + " ended; the job was recovered: attempt " +
          (data.attempt + 1) + " follows (pick attempt " + data.attempt + " above for its whole log)\n";
        var gen = s.gen;
        reset();
        s.gen = gen;  // the same loop goes on, now on the next attempt
        s.attempt = data.attempt + 1;
        pre.appendChild(el("span", { "class": "attempt-note" }, note));
        return "more";
      }
      pre.setAttribute("data-done", "true");
      return false;
    }
    function loop(gen) {
      step(gen).then(function (again) {
        if (gen !== s.gen || again === false) { return; }
        if (!s.atEnd) { return; }  // an earlier part is shown: following resumes at the end
        setTimeout(function () { loop(gen); }, again === "more" ? 50 : EVERY);
      }, function () { if (gen === s.gen) { setTimeout(function () { loop(gen); }, EVERY * 2); } });
    }
    function restart() { reset(); loop(s.gen); }
    // the part before the first shown, at the top; the last is dropped past MAX_PARTS
    function loadEarlier() {
      if (!(s.first > 0)) { return; }
      var k = s.first - 1;
      earlier.disabled = true;
      api(path + "/part" + query({ part: k })).then(function (data) {
        earlier.disabled = false;
        var before = pre.scrollHeight;
        pre.insertBefore(partNode(k, data.text, true, -1), pre.querySelector("span.part"));
        s.first = k;
        var shown = pre.querySelectorAll("span.part");
        if (shown.length > MAX_PARTS) {
          shown[shown.length - 1].remove();
          s.last = Number(shown[shown.length - 2].getAttribute("data-part"));
          s.atEnd = false;
          s.gen += 1;  // stop following: "jump to the end" resumes
          if (follow) { follow.checked = false; }
        }
        pre.scrollTop += pre.scrollHeight - before;
        marks();
      }, function () { earlier.disabled = false; });
    }
    // one part with a search hit in it, the hit marked and scrolled to
    function showHit(hit) {
      api(path + "/part" + query({ part: hit.part })).then(function (data) {
        s.gen += 1;
        pre.replaceChildren(partNode(hit.part, data.text, true, hit.line));
        s.first = hit.part; s.last = hit.part; s.lastLen = data.text.length;
        s.atEnd = hit.part === data.parts - 1 && finished(data);
        if (follow) { follow.checked = false; }
        marks();
        later.hidden = false;
        var mark = document.getElementById("log-hit");
        if (mark) { pre.scrollTop = mark.offsetTop - pre.offsetTop - 40; }
      });
    }
    function search(q) {
      api(path + "/search" + query({ q: q })).then(function (data) {
        hitsList.replaceChildren();
        hitsList.hidden = false;
        var head = el("li", { "class": "hits-head" }, data.hits.length + (data.truncated ? "+" : "") +
          " line" + (data.hits.length === 1 ? "" : "s") + " match");
        hitsList.appendChild(head);
        data.hits.forEach(function (hit) {
          var item = el("li");
          var link = el("button", { type: "button", "class": "hit", "data-part": String(hit.part) });
          link.appendChild(bidi(hit.text));
          link.addEventListener("click", function () { showHit(hit); });
          item.appendChild(link);
          hitsList.appendChild(item);
        });
      }, function (e) { hitsList.hidden = false; hitsList.replaceChildren(el("li", {}, e.message)); });
    }
    earlier.addEventListener("click", loadEarlier);
    later.addEventListener("click", function () { if (follow) { follow.checked = true; } restart(); });
    if (times) {
      times.addEventListener("change", function () { pre.classList.toggle("no-times", !times.checked); });
    }
    searchForm.addEventListener("submit", function (e) {
      e.preventDefault();
      var q = document.getElementById("log-search").value;
      if (q) { search(q); }
    });
    if (workerSel) { workerSel.addEventListener("change", restart); }
    if (attemptSel) { attemptSel.addEventListener("change", restart); }
    restart();
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
    var elapsed = document.getElementById("elapsed");
    if (elapsed) {
      if (job.state.started_at) { elapsed.setAttribute("data-started", job.state.started_at); }
      if (job.state.finished_at) { elapsed.setAttribute("data-finished", job.state.finished_at); }
      else { elapsed.removeAttribute("data-finished"); }
      tickElapsed();
    }
  }

  // "running for 1m 05s" (counted up every second), then "ran 1m 12s"
  function tickElapsed() {
    var elapsed = document.getElementById("elapsed");
    var started = elapsed && elapsed.getAttribute("data-started");
    if (!started) { return; }
    var finished = elapsed.getAttribute("data-finished");
    var end = finished ? Date.parse(finished) : Date.now();
    var text = duration(Math.max(0, (end - Date.parse(started)) / 1000));
    elapsed.textContent = finished ? "ran " + text : "running for " + text;
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
    setInterval(tickElapsed, 1000);
    logViewer(jobId);
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
    if (!svg || !PAGE.usage) { return; }
    // chip-hours, useful vs lost; jobs that used no chips (CPU only): their running hours
    var chips = PAGE.usage.total && PAGE.usage.total.chip_hours > 0;
    var running = PAGE.usage.total && PAGE.usage.total.running_hours > 0;
    drawBars(svg, PAGE.usage.days, chips || !running ? USAGE_KEYS : [["running_hours", "#2f6fdf"]], "day");
    relativeTimes();
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
