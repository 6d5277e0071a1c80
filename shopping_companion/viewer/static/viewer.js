// shopcomp view: the viewer's only script (no inline script anywhere: the CSP forbids it).
// Data reaches it through <script type="application/json"> blocks; every value is inserted with
// textContent, never as HTML. Works from a server and from a static export opened over file://.
(function () {
  "use strict";

  var GOLD_KEY = "shopcomp.view.hideGold";

  function readJSON(id) {
    var el = document.getElementById(id);
    if (!el) return null;
    try { return JSON.parse(el.textContent); } catch (e) { return null; }
  }

  function store(key, value) {
    try {
      if (value === undefined) return window.localStorage.getItem(key);
      window.localStorage.setItem(key, value);
    } catch (e) { /* file:// or private mode: no persistence */ }
    return null;
  }

  // ---------------------------------------------------------------- gold preferences: hide toggle
  function setGoldHidden(hidden) {
    document.body.classList.toggle("gold-hidden", hidden);
    var buttons = document.querySelectorAll("[data-action=toggle-gold]");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].textContent = hidden ? "Show gold preferences" : "Hide gold preferences";
      buttons[i].setAttribute("aria-pressed", hidden ? "true" : "false");
    }
  }

  // ---------------------------------------------------------------- folding
  function setAllDetails(open) {
    var all = document.querySelectorAll("main details");
    for (var i = 0; i < all.length; i++) all[i].open = open;
  }

  // ---------------------------------------------------------------- sortable tables
  function cellValue(row, idx) {
    var cell = row.cells[idx];
    if (!cell) return "";
    var v = cell.getAttribute("data-v");
    return v === null ? cell.textContent.trim() : v;
  }

  function sortTable(table, th) {
    var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute("data-sort") === "num";
    // first click: ascending; a click on the ascending column: descending
    var desc = th.classList.contains("sorted-asc");
    var heads = table.querySelectorAll("th");
    for (var i = 0; i < heads.length; i++) heads[i].classList.remove("sorted-asc", "sorted-desc");
    th.classList.add(desc ? "sorted-desc" : "sorted-asc");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, idx), y = cellValue(b, idx), c;
      if (numeric) {
        var fx = parseFloat(x), fy = parseFloat(y);
        var nx = isNaN(fx), ny = isNaN(fy);
        if (nx || ny) return nx === ny ? 0 : (nx ? 1 : -1); // blanks last in both directions
        c = fx - fy;
      } else {
        c = x.localeCompare(y);
      }
      return desc ? -c : c;
    });
    for (var j = 0; j < rows.length; j++) body.appendChild(rows[j]);
  }

  // ---------------------------------------------------------------- episode rows (live + export)
  // As the server's visible(): C0 controls (but tab, newlines) and DEL as their control pictures,
  // bidirectional embeddings / overrides / isolates as "\u27e8U+202E\u27e9" (they cannot reorder the row).
  function vis(s) {
    return String(s).replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f\u202a-\u202e\u2066-\u2069]/g, function (c) {
      var n = c.charCodeAt(0);
      if (n === 0x7f) return "\u2421";
      if (n < 0x20) return String.fromCharCode(0x2400 + n);
      return "\u27e8U+" + n.toString(16).toUpperCase() + "\u27e9";
    });
  }

  function fmt(x) {
    if (x === null || x === undefined) return "\u2013";
    if (typeof x === "boolean") return x ? "yes" : "no";
    if (typeof x === "number") return Number.isInteger(x) ? String(x) : x.toFixed(3);
    return vis(x);
  }

  function td(text, cls, value) {
    var el = document.createElement("td");
    el.textContent = text;
    if (cls) el.className = cls;
    if (value !== undefined && value !== null) el.setAttribute("data-v", String(value));
    return el;
  }

  function badge(text, cls) {
    var el = document.createElement("span");
    el.className = "badge " + cls;
    el.textContent = text;
    return el;
  }

  function clip(s, n) {
    if (s === null || s === undefined) return "";
    s = vis(s);
    return s.length > n ? s.slice(0, n) + "\u2026" : s;
  }

  // One <tr> for an EpisodeRow dict; hrefOf(row) gives the episode link. Columns as in the
  // server's episodes table (templates/_macros.html, episode_row).
  function rowElement(row, hrefOf) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-line", String(row.line));
    var line = document.createElement("td");
    line.className = "num";
    var a = document.createElement("a");
    a.href = hrefOf(row);
    a.textContent = String(row.line);
    line.appendChild(a);
    tr.appendChild(line);
    var st = document.createElement("td");
    st.appendChild(badge(vis(row.status), row.status));
    if (row.problem) { var p = document.createElement("div"); p.className = "small muted row-problem"; p.title = clip(row.problem, 500); p.textContent = clip(row.problem, 90); st.appendChild(p); }
    tr.appendChild(st);
    var task = document.createElement("td");
    task.className = "task";
    var ta = document.createElement("a");
    ta.href = hrefOf(row);
    ta.textContent = row.task_id === null ? "(unknown)" : vis(row.task_id);
    task.appendChild(ta);
    tr.appendChild(task);
    var sc = document.createElement("td");
    if (row.success === true) sc.appendChild(badge("success", "success"));
    else if (row.success === false) sc.appendChild(badge("fail", "fail"));
    else sc.textContent = "\u2013";
    sc.setAttribute("data-v", row.success === null || row.success === undefined ? "" : (row.success ? "1" : "0"));
    tr.appendChild(sc);
    tr.appendChild(td(fmt(row.taxonomy), "tax"));
    tr.appendChild(td(fmt(row.task_type)));
    tr.appendChild(td(vis([row.source, row.category].filter(function (x) { return x; }).join(" / ") || "\u2013"), "wrap"));
    tr.appendChild(td(fmt(row.strategy), "wrap"));
    tr.appendChild(td(fmt(row.trial), "num", row.trial));
    // r1 / r2: the outcome rewards R1 / R2; stage1_total / stage2_total: "S1 total" / "S2 total"
    ["acc", "r1", "r2", "stage1_total", "stage2_total", "r_tool", "r_fmt", "turns", "tool_calls"].forEach(function (k) {
      tr.appendChild(td(fmt(row[k]), "num", row[k]));
    });
    tr.appendChild(td(fmt(row.termination), "wrap"));
    var instr = td(clip(row.instruction, 160), "instr");
    instr.title = clip(row.instruction, 500);
    tr.appendChild(instr);
    return tr;
  }

  // ---------------------------------------------------------------- live refresh (server only)
  // Elements with data-live-field="NAME" (a RunSummary field; "pass_hat_k.3" for pass^3) show that
  // field; data-live-kind: "pct" (a share as a percentage), "time" (ISO time to the minute),
  // "badge CLS" (a count, in a badge when > 0), else the value as text. Sortable cells (data-v)
  // get the new sort value too.
  function summaryField(summary, path) {
    var v = summary, parts = path.split(".");
    for (var i = 0; i < parts.length; i++) {
      if (v === null || v === undefined || typeof v !== "object") return null;
      v = v[parts[i]];
    }
    return v === undefined ? null : v;
  }
  function pct(x) {
    return (typeof x !== "number" || !isFinite(x)) ? "\u2013" : (100 * x).toFixed(1) + "%";
  }
  function applySummary(root, summary) {
    var els = root.querySelectorAll("[data-live-field]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i], v = summaryField(summary, el.getAttribute("data-live-field"));
      var kind = el.getAttribute("data-live-kind") || "";
      if (kind === "pct") {
        el.textContent = pct(v);
      } else if (kind === "time") {
        el.textContent = vis(String(v || "").slice(0, 16).replace("T", " "));
        el.setAttribute("title", vis(String(v || "")));
      } else if (kind.indexOf("badge") === 0) {
        el.textContent = "";
        if (typeof v === "number" && v > 0) el.appendChild(badge(String(v), kind.slice(6)));
        else el.textContent = v === null ? "\u2013" : vis(String(v));
      } else {
        el.textContent = v === null ? "\u2013" : vis(String(v));
      }
      if (el.hasAttribute("data-v")) el.setAttribute("data-v", v === null || typeof v === "object" ? "" : String(v));
    }
  }

  function startRunsLive(cfg) {
    if (!cfg || !cfg.live || !cfg.runs_url || !window.fetch) return;
    var notice = document.getElementById("live-notice");
    var timer = window.setInterval(poll, 2500);
    function poll() {
      window.fetch(cfg.runs_url, { headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          if (!data || !data.runs) return;
          var rows = {}, trs = document.querySelectorAll("#runs tbody tr[data-run]");
          for (var i = 0; i < trs.length; i++) rows[trs[i].getAttribute("data-run")] = trs[i];
          var added = 0;
          for (var j = 0; j < data.runs.length; j++) {
            var s = data.runs[j], tr = rows[vis(s.run_id)];
            if (!tr) { added += 1; continue; }
            applySummary(tr, s);
            if (!s.live) {
              var b = tr.querySelector(".badge.live");
              if (b) b.parentNode.removeChild(b);
            }
          }
          if (notice && (added || !data.live)) {
            notice.classList.remove("hidden");
            notice.textContent = (added ? added + " new run(s) since this page was loaded; reload to list them. " : "") +
              (data.live ? "" : "No run is being written any more.");
          }
          if (!data.live) window.clearInterval(timer);
        })
        .catch(function () { /* server gone: keep the page as it is */ });
    }
  }

  function startLive(cfg) {
    if (!cfg || !cfg.live || !cfg.rows_url || !window.fetch) return;
    var after = cfg.after || 0, pending = 0;
    var body = document.querySelector("#episodes tbody");
    var notice = document.getElementById("live-notice");
    var timer = window.setInterval(poll, 2500);
    function poll() {
      window.fetch(cfg.rows_url + "?after=" + encodeURIComponent(after), { headers: { "Accept": "application/json" } })
        .then(function (r) {
          if (r.status === 503) { // the run file cannot be read now: say so, keep polling
            return r.json().then(function (d) {
              if (notice && d && d.error) {
                notice.classList.remove("hidden");
                notice.textContent = "The run file cannot be read now: " + vis(d.error) + " (still trying).";
              }
              return null;
            });
          }
          return r.ok ? r.json() : null;
        })
        .then(function (data) {
          if (!data) return;
          var rows = data.rows || [];
          for (var i = 0; i < rows.length; i++) {
            after = Math.max(after, rows[i].line);
            if (cfg.append && body) {
              body.appendChild(rowElement(rows[i], function (row) { return cfg.episode_base + row.line; }));
            } else {
              pending += 1;
            }
          }
          if (notice && (pending || !data.live)) {
            notice.classList.remove("hidden");
            notice.textContent = (pending ? pending + " new episode line(s) since this page was loaded. " : "") +
              (data.live ? "" : "The run is no longer being written. ") + "Reload to update the filters, paging and totals.";
          }
          if (data.summary) applySummary(document, data.summary);
          if (!data.live) window.clearInterval(timer);
        })
        .catch(function () { /* server gone: keep the page as it is */ });
    }
  }

  // ---------------------------------------------------------------- export index: client-side filters
  function startExportIndex(rows) {
    var form = document.getElementById("export-filters");
    var body = document.querySelector("#episodes tbody");
    var shown = document.getElementById("export-shown");
    if (!form || !body) return;
    function val(name) { var el = form.elements[name]; return el ? (el.type === "checkbox" ? el.checked : el.value) : ""; }
    function render() {
      var failed = val("failed"), type = val("task_type"), tax = val("taxonomy"), strat = val("strategy");
      var ability = val("ability"), stress = val("stress");
      var q = String(val("q") || "").toLowerCase();
      while (body.firstChild) body.removeChild(body.firstChild);
      var n = 0;
      for (var i = 0; i < rows.length; i++) {
        var r = rows[i];
        if (failed && r.success !== false) continue;
        if (type && r.task_type !== type) continue;
        if (tax && r.taxonomy !== tax) continue;
        if (strat && r.strategy !== strat) continue;
        if (ability && String(r.ability || "").split(",").indexOf(ability) < 0) continue;
        if (stress && r.stress !== stress) continue;
        if (q && String(r.instruction || "").toLowerCase().indexOf(q) < 0 &&
            String(r.task_id || "").toLowerCase().indexOf(q) < 0) continue;
        body.appendChild(rowElement(r, function (row) { return "episodes/" + row.line + ".html"; }));
        n += 1;
      }
      if (shown) shown.textContent = n + " of " + rows.length;
    }
    form.addEventListener("input", render);
    form.addEventListener("submit", function (e) { e.preventDefault(); render(); });
    render();
  }

  // ---------------------------------------------------------------- wiring
  document.addEventListener("DOMContentLoaded", function () {
    setGoldHidden(store(GOLD_KEY) === "1");
    document.addEventListener("click", function (e) {
      var t = e.target;
      if (!(t instanceof Element)) return;
      var action = t.getAttribute("data-action");
      if (action === "toggle-gold") {
        var hidden = !document.body.classList.contains("gold-hidden");
        setGoldHidden(hidden);
        store(GOLD_KEY, hidden ? "1" : "0");
      } else if (action === "expand-all") {
        setAllDetails(true);
      } else if (action === "collapse-all") {
        setAllDetails(false);
      } else if (t.tagName === "TH" && t.hasAttribute("data-sort")) {
        var table = t.closest("table.sortable");
        if (table) sortTable(table, t);
      }
    });
    startLive(readJSON("live-config"));
    startRunsLive(readJSON("runs-live-config"));
    var exported = readJSON("export-rows");
    if (exported) startExportIndex(exported);
  });
})();
