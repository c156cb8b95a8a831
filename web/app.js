// podq dashboard: polls the JSON API every 2 s and renders with DOM methods only.
// Every piece of data reaches the page through textContent or setAttribute, never innerHTML.
"use strict";

const API = "/api/v1";
const REFRESH_MS = 2000;
const FETCH_TIMEOUT_MS = 8000;
const STATES = ["running", "leased", "queued", "held", "succeeded", "failed", "cancelled"];
const METRICS = ["train/lm_loss", "train/exact_accuracy", "eval/exact_accuracy"];

const ui = {
  stateFilter: "",
  groupFilter: "",
  text: "",
  selected: null, // job id whose detail panel is open
  panelJob: null, // job id the panel's content belongs to
  jobs: [],
  jobsById: new Map(),
  groupNames: "",
  lastOk: null,
};

const $ = (id) => document.getElementById(id);

// ---------- small helpers ----------

/** Creates an element; string/number children become text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function badge(state, kind = "state") {
  return el("span", { class: `badge ${kind}-${state || "none"}`, "data-badge": state || "" }, state || "—");
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function getJSON(path) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  try {
    const resp = await fetch(API + path, {
      headers: { Accept: "application/json" },
      cache: "no-store",
      signal: ctl.signal,
    });
    if (!resp.ok) {
      let message = `HTTP ${resp.status}`;
      try {
        const body = await resp.json();
        if (body && body.error && body.error.message) message = body.error.message;
      } catch (_) { /* not JSON */ }
      throw new HttpError(resp.status, message);
    }
    return await resp.json();
  } finally {
    clearTimeout(timer);
  }
}

function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString("en-US");
  if (a === 0) return "0";
  if (a < 0.001) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

function fmtInt(v) {
  return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US");
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  if (ms > 0 && ms < 1000) return "<1s";
  const neg = ms < 0;
  let s = Math.round(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  let out;
  if (d > 0) out = `${d}d ${h}h`;
  else if (h > 0) out = `${h}h ${m}m`;
  else if (m > 0) out = `${m}m ${s}s`;
  else out = `${s}s`;
  return neg ? `-${out}` : out;
}

function fmtTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const now = new Date();
  const sameDay = d.toDateString() === now.toDateString();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  if (sameDay) return time;
  return `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

function fmtAgo(iso) {
  if (!iso) return "–";
  const ms = Date.now() - new Date(iso).getTime();
  if (!Number.isFinite(ms)) return String(iso);
  if (ms < 5000) return "just now";
  return `${fmtDuration(ms)} ago`;
}

function timeCell(iso) {
  return el("time", { datetime: iso || null, title: iso || null }, fmtTime(iso));
}

function stepText(step, total) {
  if (step === null || step === undefined) return total ? `– / ${fmtInt(total)}` : "–";
  return total ? `${fmtInt(step)} / ${fmtInt(total)}` : fmtInt(step);
}

function progressBar(step, total) {
  const known = Boolean(total && total > 0);
  const pct = known ? Math.max(0, Math.min(100, (100 * (step || 0)) / total)) : 0;
  const bar = el("div", {
    class: known ? "progress" : "progress unknown",
    role: "progressbar",
    "aria-valuemin": 0,
    "aria-valuemax": 100,
    "aria-valuenow": known ? pct.toFixed(1) : null,
    title: known ? `${pct.toFixed(1)} %` : "total steps not known yet",
  }, el("div", { class: "fill", style: known ? `width:${pct.toFixed(2)}%` : null }));
  return bar;
}

function experimentOf(id) {
  const job = ui.jobsById.get(id);
  return job ? job.experiment : id ? String(id).slice(0, 8) : "";
}

// ---------- URL hash keeps filters and the open job across reloads ----------

function readHash() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  ui.stateFilter = params.get("state") || "";
  ui.groupFilter = params.get("group") || "";
  ui.text = params.get("q") || "";
  ui.selected = params.get("job") || null;
  $("filter-state").value = ui.stateFilter;
  $("filter-text").value = ui.text;
  syncGroupSelect();
}

function writeHash() {
  const params = new URLSearchParams();
  if (ui.stateFilter) params.set("state", ui.stateFilter);
  if (ui.groupFilter) params.set("group", ui.groupFilter);
  if (ui.text) params.set("q", ui.text);
  if (ui.selected) params.set("job", ui.selected);
  const hash = params.toString();
  history.replaceState(null, "", hash ? `#${hash}` : location.pathname + location.search);
}

function syncGroupSelect() {
  const select = $("filter-group");
  if (ui.groupFilter && ![...select.options].some((o) => o.value === ui.groupFilter)) {
    select.append(el("option", { value: ui.groupFilter }, ui.groupFilter));
  }
  select.value = ui.groupFilter;
}

// ---------- rendering: summary ----------

function renderCounts(counts) {
  const box = $("state-counts");
  const total = Object.values(counts || {}).reduce((a, b) => a + b, 0);
  const items = STATES.map((state) => {
    const n = (counts && counts[state]) || 0;
    return el("button", {
      type: "button",
      class: `count state-${state}${n === 0 ? " zero" : ""}${ui.stateFilter === state ? " active" : ""}`,
      "data-state": state,
      "data-count": n,
      title: `show ${state} jobs`,
    }, el("span", { class: "n" }, fmtInt(n)), el("span", { class: "label" }, state));
  });
  items.push(el("div", { class: "count total", "data-state": "total", "data-count": total },
    el("span", { class: "n" }, fmtInt(total)), el("span", { class: "label" }, "total")));
  box.replaceChildren(...items);
}

function renderQueue(status) {
  $("queue-hours").textContent = fmtNum(status.queue_hours);
  if (status.queue_eta) {
    const eta = new Date(status.queue_eta);
    $("queue-eta").textContent = fmtDuration(eta.getTime() - Date.now());
    $("queue-eta-date").textContent = `drains ${eta.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" })}`;
    $("queue-eta").title = status.queue_eta;
  } else {
    $("queue-eta").textContent = "–";
    $("queue-eta-date").textContent = "queue empty";
    $("queue-eta").removeAttribute("title");
  }
}

/** Goodput as "92% kept · 1h 3m lost · 5m overhead", or null when there is nothing to say. */
function goodputText(g) {
  if (!g || g.ratio === null || g.ratio === undefined) return null;
  const parts = [`${(100 * g.ratio).toFixed(g.ratio >= 0.995 || g.ratio < 0.1 ? 0 : 1)}% goodput`];
  if (g.lost_s > 0) parts.push(`${fmtDuration(g.lost_s * 1000)} lost`);
  if (g.overhead_s > 0) parts.push(`${fmtDuration(g.overhead_s * 1000)} overhead`);
  return parts.join(" · ");
}

function renderGoodput(g) {
  const box = $("goodput");
  const text = goodputText(g);
  box.hidden = !text;
  box.textContent = text || "";
  if (g) box.title = `pod time kept ${fmtDuration(g.kept_s * 1000)}, lost ${fmtDuration(g.lost_s * 1000)}, overhead ${fmtDuration(g.overhead_s * 1000)}`;
}

function podStateClass(state) {
  const s = String(state || "").toUpperCase();
  if (s === "READY") return "ok";
  if (["PREEMPTED", "TERMINATED", "FAILED", "DELETED"].includes(s)) return "bad";
  return "warn";
}

function renderPods(pods) {
  const box = $("pods");
  if (!pods || pods.length === 0) {
    box.replaceChildren(el("p", { class: "empty" }, "No pod has reported yet."));
    return;
  }
  box.replaceChildren(...pods.map((pod) => {
    const health = String(pod.health || "");
    const pre = pod.preflight;
    const preText = !pre ? "no preflight" : pre.passed ? "preflight ok" : `preflight failed (${pre.failures.length})`;
    const preTitle = pre && pre.failures && pre.failures.length
      ? pre.failures.map((f) => `${f.host === null || f.host === undefined ? "pod" : `host ${f.host}`}: ${f.check}: ${f.message}`).join("\n")
      : null;
    return el("div", { class: "pod", "data-pod": pod.name, "data-pod-state": pod.state },
      el("div", { class: "pod-line" },
        el("span", { class: "pod-name" }, pod.name),
        el("span", { class: "muted" }, `${pod.accelerator} · ${pod.hosts} hosts`)),
      el("div", { class: "pod-line" },
        el("span", { class: `pill ${podStateClass(pod.state)}` }, pod.state || "?"),
        el("span", { class: `pill ${health.toUpperCase() === "HEALTHY" ? "ok" : "warn"}` }, health || "?"),
        el("span", { class: `pill ${!pre ? "" : pre.passed ? "ok" : "bad"}`, title: preTitle }, preText)),
      pod.recovery ? el("div", { class: "pod-line recovery" }, `recovering: ${pod.recovery}`) : null,
      el("div", { class: "pod-line muted" },
        pod.current_job
          ? el("span", null, "running ", jobLink(pod.current_job))
          : el("span", null, "idle"),
        el("span", { title: pod.last_seen_at }, `seen ${fmtAgo(pod.last_seen_at)}`)));
  }));
}

function jobLink(id) {
  const a = el("a", { href: "#", class: "joblink", "data-open-job": id }, experimentOf(id));
  return a;
}

function renderRunning(running) {
  const box = $("running");
  if (!running || running.length === 0) {
    box.replaceChildren(el("p", { class: "empty" }, "Nothing is running."));
    return;
  }
  const head = el("thead", null, el("tr", null,
    el("th", null, "Experiment"), el("th", null, "State"), el("th", null, "Pod"),
    el("th", { class: "num" }, "Attempt"), el("th", { class: "bar-col" }, "Progress"),
    el("th", { class: "num" }, "Step"), el("th", { class: "num" }, "Steps/s"), el("th", { class: "num" }, "Left")));
  const body = el("tbody", null, ...running.map((r) => {
    const rate = r.steps_per_s;
    let remaining = null;
    if (rate && rate > 0 && r.total_steps && r.step !== null && r.step !== undefined) {
      remaining = ((r.total_steps - r.step) / rate) * 1000;
    }
    return el("tr", { class: "run", "data-job-id": r.job_id, "data-state": r.state, tabindex: 0 },
      el("td", { class: "exp" }, r.experiment),
      el("td", null, badge(r.state)),
      el("td", null, r.pod || "–"),
      el("td", { class: "num" }, String(r.attempt)),
      el("td", { class: "bar-col" }, progressBar(r.step, r.total_steps)),
      el("td", { class: "num mono" }, stepText(r.step, r.total_steps)),
      el("td", { class: "num mono" }, rate ? fmtNum(rate) : "–"),
      el("td", { class: "num muted" }, remaining !== null ? fmtDuration(remaining) : "–"));
  }));
  box.replaceChildren(el("div", { class: "table-wrap" }, el("table", { class: "grid running-table", id: "running-table" }, head, body)));
}

// ---------- rendering: groups and jobs ----------

function countsStrip(counts) {
  const strip = el("div", { class: "strip" });
  for (const state of STATES) {
    const n = counts && counts[state];
    if (!n) continue;
    strip.append(el("span", { class: `mini state-${state}`, "data-state": state, title: `${n} ${state}` },
      el("b", null, String(n)), ` ${state}`));
  }
  if (!strip.childNodes.length) strip.append(el("span", { class: "muted" }, "no jobs"));
  return strip;
}

function renderGroups(groups) {
  const tbody = $("groups-table").tBodies[0];
  tbody.replaceChildren(...groups.map((g) => el("tr", {
    "data-group": g.name,
    class: ui.groupFilter === g.name ? "selected" : null,
    tabindex: 0,
  },
  el("td", { class: "mono" }, g.name),
  el("td", { class: "title" }, g.title),
  el("td", { class: "num" }, String(g.experiments.length)),
  el("td", { class: "num muted" }, `${fmtNum(g.planned_hours)} h`),
  el("td", null, countsStrip(g.jobs)))));

  const names = groups.map((g) => g.name).join("\n");
  if (names !== ui.groupNames) {
    ui.groupNames = names;
    const select = $("filter-group");
    select.replaceChildren(el("option", { value: "" }, "all groups"),
      ...groups.map((g) => el("option", { value: g.name }, g.name)));
    syncGroupSelect();
  }
}

function jobMatches(job) {
  if (ui.stateFilter && job.state !== ui.stateFilter) return false;
  if (ui.groupFilter && job.group !== ui.groupFilter) return false;
  if (ui.text && !job.experiment.toLowerCase().includes(ui.text.toLowerCase())) return false;
  return true;
}

function renderJobs(list) {
  const tbody = $("jobs-table").tBodies[0];
  const shown = ui.jobs.filter(jobMatches);
  tbody.replaceChildren(...shown.map((job) => {
    let message = job.message || "";
    const notes = [];
    if (job.same_as) notes.push(el("span", { class: "shares", "data-same-as": job.same_as },
      "shares run of ", jobLink(job.same_as)));
    if (job.not_before && new Date(job.not_before).getTime() > Date.now()) {
      notes.push(el("span", { class: "muted", title: job.not_before }, `backoff until ${fmtTime(job.not_before)}`));
    }
    return el("tr", {
      "data-job-id": job.id,
      "data-state": job.state,
      "data-experiment": job.experiment,
      "data-group": job.group,
      class: job.id === ui.selected ? "selected" : null,
      tabindex: 0,
    },
    el("td", { class: "exp" }, job.experiment),
    el("td", { class: "mono muted" }, job.group),
    el("td", null, badge(job.state)),
    el("td", { class: "num" }, String(job.priority)),
    el("td", { class: "step" },
      el("span", { class: "mono" }, stepText(job.last_step, job.total_steps)),
      job.total_steps ? progressBar(job.last_step, job.total_steps) : null),
    el("td", { class: "num" }, String(job.attempt_count)),
    el("td", { class: `num${job.preemptions ? " warn-text" : ""}` }, String(job.preemptions)),
    el("td", { class: `num${job.failures ? " bad-text" : ""}`, title: `${job.failures} of ${job.max_failures} allowed` },
      `${job.failures}/${job.max_failures}`),
    el("td", { class: "msg", title: message || null }, ...notes, message ? el("span", null, message) : null));
  }));
  $("jobs-empty").hidden = shown.length !== 0;
  const total = list.total ?? ui.jobs.length;
  let text = `${shown.length} of ${ui.jobs.length}`;
  if (total > ui.jobs.length) text += ` (server has ${total}; first ${ui.jobs.length} loaded)`;
  $("jobs-shown").textContent = `${text} jobs`;
}

// ---------- detail panel ----------

function lineChart(name, points) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 320, H = 132, L = 48, R = 10, T = 26, B = 22;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("data-metric", name);
  svg.setAttribute("role", "img");
  const text = (x, y, str, cls, anchor = "start") => {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", x); t.setAttribute("y", y);
    t.setAttribute("class", cls); t.setAttribute("text-anchor", anchor);
    t.textContent = str;
    svg.append(t);
  };
  const line = (x1, y1, x2, y2, cls) => {
    const l = document.createElementNS(NS, "line");
    for (const [k, v] of Object.entries({ x1, y1, x2, y2 })) l.setAttribute(k, v);
    l.setAttribute("class", cls);
    svg.append(l);
  };
  text(4, 14, name, "c-title");
  const pts = (points || []).filter((p) => Number.isFinite(p.value));
  svg.setAttribute("aria-label", `${name}: ${pts.length} points`);
  if (pts.length === 0) {
    text(W / 2, H / 2 + 6, "no data yet", "c-empty", "middle");
    return svg;
  }
  let [x0, x1] = [pts[0].step, pts[pts.length - 1].step];
  let y0 = Math.min(...pts.map((p) => p.value)), y1 = Math.max(...pts.map((p) => p.value));
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.05 || 1; y0 -= d; y1 += d; }
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  line(L, T, W - R, T, "c-grid");
  line(L, H - B, W - R, H - B, "c-axis");
  line(L, T, L, H - B, "c-axis");
  text(L - 4, T + 4, fmtNum(y1), "c-label", "end");
  text(L - 4, H - B, fmtNum(y0), "c-label", "end");
  text(L, H - 6, fmtInt(pts[0].step), "c-label", "start");
  text(W - R, H - 6, `step ${fmtInt(pts[pts.length - 1].step)}`, "c-label", "end");
  const poly = document.createElementNS(NS, "polyline");
  poly.setAttribute("points", pts.map((p) => `${sx(p.step).toFixed(1)},${sy(p.value).toFixed(1)}`).join(" "));
  poly.setAttribute("class", "c-line");
  svg.append(poly);
  const last = pts[pts.length - 1];
  const dot = document.createElementNS(NS, "circle");
  dot.setAttribute("cx", sx(last.step).toFixed(1)); dot.setAttribute("cy", sy(last.value).toFixed(1));
  dot.setAttribute("r", 2.5); dot.setAttribute("class", "c-dot");
  svg.append(dot);
  text(W - R, 14, fmtNum(last.value), "c-last", "end");
  return svg;
}

function fact(label, value, cls) {
  if (value === null || value === undefined || value === "") return [];
  return [el("dt", null, label), el("dd", { class: cls || null }, value)];
}

function renderDetail(detail, metrics, events) {
  const panel = $("job-detail");
  panel.setAttribute("data-job-id", detail.id);
  panel.setAttribute("data-state", detail.state);
  $("detail-experiment").textContent = detail.experiment;
  $("detail-state").replaceChildren(badge(detail.state));
  $("detail-sub").textContent = `${detail.group} · ${detail.id}`;
  $("detail-error").hidden = true;

  const attempts = Array.isArray(detail.attempts) ? detail.attempts : [];
  const checkpoints = Array.isArray(detail.checkpoints) ? detail.checkpoints : [];
  const listed = ui.jobsById.get(detail.id);
  const attemptCount = listed ? listed.attempt_count : attempts.length;
  $("detail-facts").replaceChildren(
    ...fact("Step", stepText(detail.last_step, detail.total_steps), "mono"),
    ...fact("Priority", String(detail.priority)),
    ...fact("Attempts", String(attemptCount)),
    ...fact("Failures", `${detail.failures} of ${detail.max_failures}`),
    ...fact("Preemptions", String(detail.preemptions)),
    ...fact("Submitted", detail.submitted_at ? `${fmtTime(detail.submitted_at)} (${fmtAgo(detail.submitted_at)})` : null),
    ...fact("Updated", detail.updated_at ? fmtAgo(detail.updated_at) : null),
    ...fact("Goodput", goodputText(detail.goodput)),
    ...fact("Backoff until", detail.not_before ? fmtTime(detail.not_before) : null),
    ...(detail.same_as ? [el("dt", null, "Shares run of"), el("dd", null, jobLink(detail.same_as))] : []),
    ...fact("Message", detail.message),
    ...fact("Checkpoints", detail.checkpoint_dir, "mono wrap"),
    ...fact("Resume from", detail.resume_from, "mono wrap"),
    ...fact("Config", detail.config_sha256 ? detail.config_sha256.slice(0, 16) : null, "mono"));

  const latest = detail.latest_metrics || {};
  $("detail-latest").replaceChildren(...Object.keys(latest).sort().map((k) => el("div", { class: "latest-item", "data-metric": k, title: `step ${latest[k].step}` },
    el("span", { class: "latest-name" }, k), el("span", { class: "latest-value" }, fmtNum(latest[k].value)))));

  const byName = new Map(((metrics && metrics.series) || []).map((s) => [s.name, s]));
  $("detail-charts").replaceChildren(...METRICS.map((name) => {
    const series = byName.get(name);
    return el("figure", { class: "chart-box" }, lineChart(name, series ? series.points : []));
  }));

  const atb = $("detail-attempts").tBodies[0];
  const sortedAttempts = [...attempts].sort((a, b) => b.attempt - a.attempt);
  atb.replaceChildren(...(sortedAttempts.length ? sortedAttempts.map((a) => el("tr", { "data-attempt": a.attempt },
    el("td", { class: "num" }, String(a.attempt)),
    el("td", null, a.pod),
    el("td", null, a.outcome ? badge(a.outcome, "outcome") : el("span", { class: "muted" }, a.ended_at ? "—" : "in progress")),
    el("td", { class: "mono" }, `${a.start_step ?? "–"} → ${a.end_step ?? "–"}`),
    el("td", null, timeCell(a.started_at)),
    el("td", null, a.ended_at ? timeCell(a.ended_at) : "–"),
    el("td", { class: "msg", title: a.message || null }, a.message || ""),
  )) : [el("tr", null, el("td", { colspan: 7, class: "muted" }, "No attempts yet."))]));

  const ctb = $("detail-checkpoints").tBodies[0];
  const sortedCk = [...checkpoints].sort((a, b) => b.step - a.step);
  ctb.replaceChildren(...(sortedCk.length ? sortedCk.map((c) => el("tr", { "data-step": c.step },
    el("td", { class: "num mono" }, fmtInt(c.step)),
    el("td", null, el("span", { class: `pill ${c.committed ? "ok" : "warn"}` }, c.committed ? "committed" : "partial")),
    el("td", { class: "mono wrap small" }, c.uri),
  )) : [el("tr", null, el("td", { colspan: 3, class: "muted" }, "No checkpoints yet."))]));

  const evs = [...(events || [])].sort((a, b) => (b.at < a.at ? -1 : b.at > a.at ? 1 : b.id - a.id));
  $("detail-events").replaceChildren(...(evs.length ? evs.map((e) => el("li", { "data-kind": e.kind, class: `ev ev-${e.kind}` },
    el("div", { class: "ev-head" },
      el("span", { class: "ev-kind" }, e.kind),
      e.pod ? el("span", { class: "muted" }, e.pod) : null,
      el("time", { datetime: e.at, title: e.at }, fmtTime(e.at))),
    el("div", { class: "ev-msg" }, e.message),
  )) : [el("li", { class: "muted" }, "No events.")]));
}

async function refreshDetail() {
  const id = ui.selected;
  if (!id) return;
  const enc = encodeURIComponent(id);
  try {
    const [detail, metrics, events] = await Promise.all([
      getJSON(`/jobs/${enc}`),
      getJSON(`/jobs/${enc}/metrics?names=${METRICS.map(encodeURIComponent).join(",")}&max_points=500`).catch((e) => {
        if (e instanceof HttpError) return { series: [] };
        throw e;
      }),
      getJSON(`/jobs/${enc}/events`).catch((e) => {
        if (e instanceof HttpError) return [];
        throw e;
      }),
    ]);
    if (ui.selected !== id) return; // the user moved on meanwhile
    renderDetail(detail, metrics, Array.isArray(events) ? events : events.events || []);
  } catch (e) {
    if (!(e instanceof HttpError)) throw e;
    if (ui.selected !== id) return;
    $("detail-error").textContent = e.status === 404 ? "This job no longer exists." : `Could not load the job: ${e.message}`;
    $("detail-error").hidden = false;
  }
}

function openJob(id) {
  if (!id) return;
  const changed = ui.panelJob !== id;
  ui.selected = id;
  ui.panelJob = id;
  writeHash();
  const panel = $("job-detail");
  if (changed) {
    const job = ui.jobsById.get(id);
    $("detail-experiment").textContent = job ? job.experiment : "…";
    $("detail-state").replaceChildren(job ? badge(job.state) : "");
    $("detail-sub").textContent = job ? `${job.group} · ${job.id}` : id;
    for (const part of ["detail-facts", "detail-charts", "detail-latest", "detail-events"]) $(part).replaceChildren();
    for (const t of ["detail-attempts", "detail-checkpoints"]) $(t).tBodies[0].replaceChildren();
    $("detail-body").scrollTop = 0;
  }
  panel.hidden = false;
  $("detail-backdrop").hidden = false;
  document.body.classList.add("detail-open");
  markSelectedRows();
  refreshDetail().catch(() => setConn(false));
}

function closeJob() {
  ui.selected = null;
  writeHash();
  $("job-detail").hidden = true;
  $("detail-backdrop").hidden = true;
  document.body.classList.remove("detail-open");
  markSelectedRows();
}

function markSelectedRows() {
  for (const row of $("jobs-table").tBodies[0].rows) {
    row.classList.toggle("selected", row.dataset.jobId === ui.selected);
  }
}

// ---------- the loop ----------

function setConn(ok, error) {
  const conn = $("conn");
  conn.dataset.ok = ok ? "true" : "false";
  document.body.dataset.status = ok ? "ok" : "error";
  const banner = $("conn-banner");
  if (ok) {
    ui.lastOk = new Date();
    banner.hidden = true;
    $("last-updated").textContent = `updated ${fmtTime(ui.lastOk.toISOString())}`;
  } else {
    banner.hidden = false;
    banner.textContent = error instanceof HttpError
      ? `server error (${error.message}), retrying`
      : "server unreachable, retrying";
    $("last-updated").textContent = ui.lastOk ? `last update ${fmtTime(ui.lastOk.toISOString())}` : "not connected";
  }
}

async function refresh() {
  const [status, groups, list] = await Promise.all([
    getJSON("/status"),
    getJSON("/groups"),
    getJSON("/jobs?limit=1000"),
  ]);
  ui.jobs = list.jobs || [];
  ui.jobsById = new Map(ui.jobs.map((j) => [j.id, j]));
  renderCounts(status.jobs);
  renderQueue(status);
  renderGoodput(status.goodput);
  renderPods(status.pods);
  renderRunning(status.running);
  renderGroups(groups);
  renderJobs(list);
  if (ui.selected) await refreshDetail();
}

let timer = null;
let inFlight = false;
async function tick() {
  clearTimeout(timer);
  if (inFlight) return;
  inFlight = true;
  try {
    await refresh();
    setConn(true);
  } catch (e) {
    setConn(false, e);
  } finally {
    inFlight = false;
    timer = setTimeout(tick, REFRESH_MS);
  }
}

function rerenderFromCache() {
  writeHash();
  renderJobs({ total: ui.jobs.length });
  for (const b of $("state-counts").querySelectorAll("button.count")) {
    b.classList.toggle("active", b.dataset.state === ui.stateFilter);
  }
  for (const row of $("groups-table").tBodies[0].rows) {
    row.classList.toggle("selected", row.dataset.group === ui.groupFilter);
  }
}

function init() {
  readHash();
  $("filter-state").addEventListener("change", (e) => { ui.stateFilter = e.target.value; rerenderFromCache(); });
  $("filter-group").addEventListener("change", (e) => { ui.groupFilter = e.target.value; rerenderFromCache(); });
  $("filter-text").addEventListener("input", (e) => { ui.text = e.target.value.trim(); rerenderFromCache(); });

  $("state-counts").addEventListener("click", (e) => {
    const btn = e.target.closest("button[data-state]");
    if (!btn) return;
    ui.stateFilter = ui.stateFilter === btn.dataset.state ? "" : btn.dataset.state;
    $("filter-state").value = ui.stateFilter;
    rerenderFromCache();
  });

  const groupPick = (row) => {
    ui.groupFilter = ui.groupFilter === row.dataset.group ? "" : row.dataset.group;
    syncGroupSelect();
    rerenderFromCache();
    if (ui.groupFilter) $("jobs-title").scrollIntoView({ behavior: "smooth", block: "start" });
  };
  const groupsBody = $("groups-table").tBodies[0];
  groupsBody.addEventListener("click", (e) => { const r = e.target.closest("tr[data-group]"); if (r) groupPick(r); });
  groupsBody.addEventListener("keydown", (e) => {
    const r = e.target.closest("tr[data-group]");
    if (r && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); groupPick(r); }
  });

  // Job rows, running cards and "shares run of" links all open the detail panel.
  document.addEventListener("click", (e) => {
    const link = e.target.closest("[data-open-job]");
    if (link) { e.preventDefault(); e.stopPropagation(); openJob(link.dataset.openJob); return; }
    const row = e.target.closest("#jobs-table tbody tr[data-job-id], #running tr.run[data-job-id]");
    if (row) openJob(row.dataset.jobId);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && ui.selected) { closeJob(); return; }
    if (e.key !== "Enter") return;
    const row = e.target.closest && e.target.closest("#jobs-table tbody tr[data-job-id], #running tr.run[data-job-id]");
    if (row) openJob(row.dataset.jobId);
  });
  $("detail-close").addEventListener("click", closeJob);
  $("detail-backdrop").addEventListener("click", closeJob);
  window.addEventListener("hashchange", () => {
    const before = ui.selected;
    readHash();
    rerenderFromCache();
    if (ui.selected && ui.selected !== before) openJob(ui.selected);
    else if (!ui.selected && before) closeJob();
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) tick(); });

  if (ui.selected) openJob(ui.selected);
  tick();
}

init();
