// tensortune dashboard: renders the records API (or the data embedded in a report) as
// HTML and hand-drawn SVG. No library, nothing loaded from elsewhere. Every text from the
// database goes into the page as text (textContent), never as markup.
(function () {
  "use strict";

  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
  const embedded = document.getElementById("tt-data");
  const REPORT = embedded ? JSON.parse(embedded.textContent) : null;
  const app = document.getElementById("app");

  // ---- building elements ------------------------------------------------------------
  function append(node, children) {
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "onclick") node.addEventListener("click", v);
      else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : String(v));
    }
    return append(node, children);
  }
  function show(...children) {
    app.replaceChildren();
    append(app, children);
  }
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) node.setAttribute(k, String(v));
    }
    return append(node, children);
  }

  // ---- numbers ----------------------------------------------------------------------
  function fmtTime(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    for (const [unit, scale] of [["s", 1], ["ms", 1e-3], ["µs", 1e-6]]) {
      if (s >= scale) return (s / scale).toPrecision(4) + " " + unit;
    }
    return (s * 1e9).toPrecision(4) + " ns";
  }
  function fmtSeconds(s) {
    return s < 100 ? s.toPrecision(3) + " s" : Math.round(s) + " s";
  }
  function fmtDate(epoch) {
    return new Date(epoch * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }
  function linearTicks(lo, hi, integer) {
    const span = hi - lo || Math.abs(hi) || 1;
    const mag = Math.pow(10, Math.floor(Math.log10(span / 5)));
    let step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= 6);
    if (integer) step = Math.max(1, Math.round(step));
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  function ticks(lo, hi, log, integer) {
    if (log) {
      const out = [];
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        for (const m of [1, 2, 5]) {
          const v = m * Math.pow(10, e);
          if (v >= lo && v <= hi) out.push(v);
        }
      }
      if (out.length >= 3) return out;
      return linearTicks(lo, hi, integer).filter((v) => v > 0);
    }
    return linearTicks(lo, hi, integer);
  }
  function scale(lo, hi, a, b, log) {
    if (log) {
      const l0 = Math.log(lo), l1 = Math.log(hi);
      return (v) => a + (Math.log(v) - l0) / (l1 - l0 || 1) * (b - a);
    }
    return (v) => a + (v - lo) / (hi - lo || 1) * (b - a);
  }
  function domain(values, log, zero) {
    let lo = Math.min(...values), hi = Math.max(...values);
    if (zero) lo = Math.min(0, lo);
    if (log) {
      if (lo === hi) return [lo / 2, hi * 2];
      return [lo / Math.pow(hi / lo, 0.05), hi * Math.pow(hi / lo, 0.05)];
    }
    if (lo === hi) return [zero ? 0 : lo - Math.abs(lo) * 0.5 - 1, hi + Math.abs(hi) * 0.5 + 1];
    const pad = zero ? 0 : (hi - lo) * 0.05;
    return [lo - pad, hi + (hi - lo) * 0.05];
  }

  // ---- charts ------------------------------------------------------------------------
  const W = 530, H = 280, M = { left: 80, right: 14, top: 12, bottom: 44 };

  function axes(root, xs, ys, xTicks, yTicks, xFmt, yFmt, xLabel, yLabel) {
    const x0 = M.left, x1 = W - M.right, y0 = H - M.bottom, y1 = M.top;
    const g = svg("g", { class: "axes" });
    for (const t of yTicks) {
      const y = ys(t);
      g.append(svg("line", { x1: x0, x2: x1, y1: y, y2: y, class: "grid" }),
        svg("text", { x: x0 - 6, y: y + 4, "text-anchor": "end" }, yFmt(t)));
    }
    for (const t of xTicks) {
      const x = xs(t);
      g.append(svg("line", { x1: x, x2: x, y1: y0, y2: y0 + 4, class: "tick" }),
        svg("text", { x: x, y: y0 + 17, "text-anchor": "middle" }, xFmt(t)));
    }
    g.append(svg("line", { x1: x0, x2: x1, y1: y0, y2: y0, class: "axis" }),
      svg("line", { x1: x0, x2: x0, y1: y0, y2: y1, class: "axis" }),
      svg("text", { x: (x0 + x1) / 2, y: H - 6, "text-anchor": "middle", class: "label" }, xLabel),
      svg("text", { x: 12, y: (y0 + y1) / 2, "text-anchor": "middle", class: "label",
        transform: `rotate(-90 12 ${(y0 + y1) / 2})` }, yLabel));
    root.append(g);
  }

  // Best time so far against trials or seconds: one step line per run, a point per
  // successful trial (class "pt"), and each trial's own time as a faint dot.
  function curveChart(sessions, xKey, xLabel, testid) {
    const all = sessions.flatMap((s) => s.points);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", "data-testid": testid, role: "img" });
    if (!all.length) {
      root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no successful trial"));
      return root;
    }
    const yVals = all.flatMap((p) => [p.time, p.best]);
    const log = Math.max(...yVals) / Math.min(...yVals) > 10;
    const [ylo, yhi] = domain(yVals, log, false);
    const [xlo, xhi] = domain(all.map((p) => p[xKey]), false, true);
    const xs = scale(xlo, xhi, M.left, W - M.right, false);
    const ys = scale(ylo, yhi, H - M.bottom, M.top, log);
    axes(root, xs, ys, ticks(xlo, xhi, false, xKey === "trial"), ticks(ylo, yhi, log, false),
      xKey === "trial" ? String : fmtSeconds, fmtTime, xLabel, "best time so far");
    sessions.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const g = svg("g", { class: "run", "data-session": s.id });
      for (const p of s.points) {
        g.append(svg("circle", { cx: xs(p[xKey]), cy: ys(p.time), r: 2, class: "measured", fill: color }));
      }
      if (s.points.length) {
        let d = `M${xs(s.points[0][xKey])},${ys(s.points[0].best)}`;
        for (const p of s.points.slice(1)) d += `H${xs(p[xKey])}V${ys(p.best)}`;
        g.append(svg("path", { d: d, stroke: color, class: "step" }));
      }
      for (const p of s.points) {
        g.append(svg("circle", { cx: xs(p[xKey]), cy: ys(p.best), r: 3.2, class: "pt", fill: color,
          "data-trial": p.trial, "data-best": p.best },
        svg("title", {}, `${s.label}: trial ${p.trial}, ${fmtSeconds(p.seconds)}: this ${fmtTime(p.time)}, ` +
          `best ${fmtTime(p.best)}\n${JSON.stringify(p.config)}`)));
      }
      root.append(g);
    });
    return root;
  }

  // The distribution of the measured (median) times of successful trials, in
  // logarithmic bins; each bar carries its count (data-count).
  function histogram(times) {
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", "data-testid": "histogram", role: "img" });
    if (!times.length) {
      root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no successful trial"));
      return root;
    }
    const lo = times[0], hi = times[times.length - 1];
    const n = Math.max(1, Math.min(30, Math.ceil(Math.sqrt(times.length)) + 2));
    const llo = Math.log(lo), lhi = Math.log(hi) + 1e-12;
    const counts = new Array(n).fill(0);
    for (const t of times) counts[Math.min(n - 1, Math.floor((Math.log(t) - llo) / (lhi - llo || 1) * n))]++;
    const edges = counts.map((_, i) => Math.exp(llo + (lhi - llo) * i / n)).concat([Math.exp(lhi)]);
    const [xlo, xhi] = lo === hi ? [lo / 1.5, hi * 1.5] : [lo, hi];
    const xs = scale(xlo, xhi, M.left, W - M.right, true);
    const ys = scale(0, Math.max(...counts), H - M.bottom, M.top, false);
    axes(root, xs, ys, ticks(xlo, xhi, true, false), ticks(0, Math.max(...counts), false, true), fmtTime, String,
      "measured time (median of each trial's runs)", "trials");
    counts.forEach((c, i) => {
      const a = lo === hi ? xs(lo) - 12 : xs(edges[i]), b = lo === hi ? xs(lo) + 12 : xs(edges[i + 1]);
      if (!c) return;
      root.append(svg("rect", { x: a + 0.5, width: Math.max(1, b - a - 1), y: ys(c), height: ys(0) - ys(c),
        class: "bar", "data-count": c }, svg("title", {}, `${c} trial(s) from ${fmtTime(edges[i])} to ${fmtTime(edges[i + 1])}`)));
    });
    return root;
  }

  // ---- pieces of the page --------------------------------------------------------------
  async function copyText(text) {
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        return true;
      }
    } catch (e) { /* fall back to a selection */ }
    const area = el("textarea", { class: "offscreen" });
    area.value = text;
    document.body.append(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    area.remove();
    return ok;
  }
  function copyButton(text) {
    const button = el("button", { class: "copy", "data-testid": "copy", "data-copy": text, title: "copy these settings" }, "copy");
    button.addEventListener("click", async () => {
      const ok = await copyText(text);
      button.dataset.copied = ok ? "yes" : "no";  // stays: what the last click did
      button.textContent = ok ? "copied" : "select and copy";
      button.classList.toggle("done", ok);
      setTimeout(() => { button.textContent = "copy"; button.classList.remove("done"); }, 1500);
    });
    return button;
  }
  function barRow(fraction, color) {
    return el("div", { class: "meter" }, el("div", { style: `width:${(100 * fraction).toFixed(1)}%;background:${color}` }));
  }
  function legend(sessions) {
    return el("ul", { class: "legend" }, sessions.map((s, i) => el("li", {},
      el("span", { class: "swatch", style: `background:${COLORS[i % COLORS.length]}` }),
      `${s.label}${s.strategy ? " (" + s.strategy + ")" : ""}: ${s.trials} trials, ${s.successes} succeeded, best ${fmtTime(s.best_seconds)}, ` +
      `started ${fmtDate(s.started_at)}`)));
  }
  function failuresTable(failures) {
    if (!failures.length) return el("p", { class: "muted", "data-testid": "failures" }, "No failures.");
    const most = Math.max(...failures.map((f) => f.count));
    const cause = { candidate: "", environment: " (environment: retried)", amends: " (found later: amends a success)" };
    return el("table", { class: "failures", "data-testid": "failures" },
      el("tr", {}, el("th", {}, "kind"), el("th", {}, "count"), el("th", {}, ""), el("th", {}, "first message")),
      failures.map((f) => el("tr", { "data-kind": f.kind },
        el("td", {}, f.kind + cause[f.cause]), el("td", { class: "num" }, f.count),
        el("td", { class: "meter-cell" }, barRow(f.count / most, "#dc2626")),
        el("td", { class: "message" }, f.example))));
  }
  function bestTable(best) {
    if (!best.length) return el("p", { class: "muted" }, "No successful configuration.");
    return el("table", { class: "best", "data-testid": "best-table" },
      el("tr", {}, el("th", {}, "#"), el("th", {}, "time"), el("th", {}, "spread"), el("th", {}, "configuration"), el("th", {}, "")),
      best.map((b, i) => el("tr", { "data-testid": "best-row" },
        el("td", { class: "num" }, i + 1), el("td", { class: "num" }, fmtTime(b.seconds)),
        el("td", { class: "num" }, (100 * b.spread).toFixed(1) + "%"),
        el("td", {}, el("code", { class: "config" }, b.config_json)),
        el("td", {}, copyButton(b.config_json)))));
  }
  function targetSection(t) {
    return el("section", { class: "target", "data-testid": "target", "data-target-id": t.id },
      el("h3", {}, t.label),
      el("p", { class: "muted" }, `${t.records} records, ${t.successes} succeeded. `,
        Object.entries(t.versions).map(([k, v]) => `${k}: ${v}`).join(" · ")),
      el("div", { class: "grid" },
        el("figure", {}, el("figcaption", {}, "Best time against trials", el("span", { class: "muted" }, " (faint: each trial's own time)")), curveChart(t.sessions, "trial", "trial", "curve-trials")),
        el("figure", {}, el("figcaption", {}, "Best time against seconds", el("span", { class: "muted" }, " (one colour per run)")), curveChart(t.sessions, "seconds", "seconds since the run started", "curve-seconds")),
        el("figure", {}, el("figcaption", {}, "Measured times"), histogram(t.times)),
        el("figure", {}, el("figcaption", {}, "Failures by kind"), failuresTable(t.failures))),
      legend(t.sessions),
      el("h4", {}, "Best configurations"), bestTable(t.best));
  }
  function slower(ratio) {
    if (!ratio) return "–";
    if (ratio === 1) return "fastest";
    return ratio < 1.1 ? `${(100 * (ratio - 1)).toFixed(1)}% slower` : `${ratio.toFixed(2)}× slower`;
  }
  function comparison(cmp) {
    const rows = cmp.targets;
    const slowest = Math.max(...rows.map((r) => r.best_seconds || 0));
    const head = el("tr", {}, el("th", {}, "target"), el("th", {}, "best"), el("th", {}, "vs fastest"), el("th", {}, ""),
      cmp.configs.map((c, i) => el("th", { class: "config-head" }, `config ${String.fromCharCode(65 + i)} `, copyButton(c.config_json))));
    const table = el("table", { class: "compare", "data-testid": "comparison" }, head,
      rows.map((r) => el("tr", { "data-target-id": r.target },
        el("td", {}, r.label), el("td", { class: "num" }, fmtTime(r.best_seconds)),
        el("td", { class: "num" }, slower(r.slowdown)),
        el("td", { class: "meter-cell" }, barRow(r.best_seconds ? r.best_seconds / slowest : 0, "#2563eb")),
        r.times.map((t) => el("td", { class: "num" }, t === null ? "not measured" : fmtTime(t))))));
    const keys = el("ul", { class: "legend" }, cmp.configs.map((c, i) => el("li", {},
      `config ${String.fromCharCode(65 + i)} (best on ${rows.find((r) => r.target === c.best_on).label}): `,
      el("code", { class: "config" }, c.config_json))));
    return el("section", { class: "comparison" }, el("h3", {}, "Across targets"),
      el("p", { class: "muted" }, rows.length > 1
        ? "Each target's best time, and each target's best configuration as measured on the others."
        : "Measured on one target only."), table, keys);
  }

  // ---- views -------------------------------------------------------------------------------
  function header(db) {
    const where = document.getElementById("db");
    if (where && db) where.textContent = db.label + (db.read_only ? " (read-only)" : "") +
      (db.damaged ? ` · ${db.damaged} damaged record(s) skipped` : "");
  }
  function renderList(data) {
    header(data.database);
    if (!data.workloads.length) {
      return show(el("p", { class: "muted" }, "This database holds no records yet: tune something (e.g. `tensortune demo`)."));
    }
    show(el("h2", {}, `Workloads (${data.workloads.length})`),
      el("table", { class: "workloads", "data-testid": "workloads" },
        el("tr", {}, el("th", {}, "workload"), el("th", {}, "key"), el("th", {}, "records"), el("th", {}, "best"), el("th", {}, "targets")),
        data.workloads.map((w) => el("tr", { "data-testid": "workload-row", "data-workload-id": w.id },
          el("td", {}, el("a", { href: `#/w/${w.id}`, "data-testid": "workload-link" }, w.name),
            el("span", { class: "muted" }, " @" + w.source_hash.slice(0, 8))),
          el("td", {}, el("code", {}, JSON.stringify(w.key))), el("td", { class: "num" }, w.records),
          el("td", { class: "num" }, fmtTime(w.best_seconds)),
          el("td", {}, el("ul", { class: "targets" }, w.targets.map((t) => el("li", {}, `${t.label}: ${t.records} records, best ${fmtTime(t.best_seconds)}`))))))));
  }
  function renderWorkload(data) {
    header(data.database);
    const w = data.workload;
    show(
      REPORT ? null : el("p", {}, el("a", { href: "#/" }, "← all workloads")),
      el("h2", { "data-testid": "workload-title" }, w.name, el("span", { class: "muted" }, " @" + w.source_hash.slice(0, 8))),
      el("p", {}, "key ", el("code", {}, JSON.stringify(w.key)), ` · ${w.records} records on ${data.targets.length} target(s)`),
      comparison(data.comparison),
      data.targets.map(targetSection));
  }
  function renderError(message) {
    show(el("p", { class: "error", "data-testid": "error" }, message), el("p", {}, el("a", { href: "#/" }, "← all workloads")));
  }
  async function getJSON(url) {
    const response = await fetch(url, { cache: "no-store" });
    const body = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
    if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
    return body;
  }
  async function route() {
    const match = location.hash.match(/^#\/w\/([^/?]*)/);
    try {
      if (match) renderWorkload(await getJSON(`api/workloads/${encodeURIComponent(decodeURIComponent(match[1]))}`));
      else renderList(await getJSON("api/workloads"));
      document.body.dataset.ready = "1";
    } catch (e) {
      renderError(e.message);
      document.body.dataset.ready = "1";
    }
  }

  if (REPORT) {
    renderWorkload(REPORT);
    document.body.dataset.ready = "1";
    return;
  }
  window.addEventListener("hashchange", () => { document.body.dataset.ready = ""; route(); });
  document.getElementById("refresh").addEventListener("click", route);
  let timer = null;
  document.getElementById("live").addEventListener("change", (event) => {
    clearInterval(timer);
    timer = event.target.checked ? setInterval(route, 3000) : null;
  });
  route();
})();
