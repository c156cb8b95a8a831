// podq dashboard. Live updates come from the server's event stream (GET /api/v1/events/stream,
// server-sent events): each event makes the page refetch only what it concerns (the job, its
// group, the status counts). If the stream breaks, a slow poll (60 s) keeps the page current
// until it is back. `?poll=2000` in the page's query string restores the old behaviour (a full
// refresh every 2 s, no stream), for comparing the two.
//
// The page's state (view, group, job, filters, metric, x axis, smoothing) lives in the URL's
// hash, so reload, back and a shared link all show the same thing.
//
// Rendering uses DOM methods only: every piece of data reaches the page through textContent
// or setAttribute, never innerHTML.
"use strict";

const API = "/api/v1";
const QUERY = new URLSearchParams(location.search);
/** Old-style polling interval in ms (`?poll=2000`); 0 = live updates through the stream. */
const POLL_MS = Math.max(0, Number(QUERY.get("poll")) || 0);
const FALLBACK_POLL_MS = 60000;
// The plan follows every change of state through the stream; this only catches the clock.
const PLAN_REFRESH_MS = 300000;
const PLAN_MIN_GAP_MS = 10000;
const STREAM_OPEN_GRACE_MS = 3000;
const FETCH_TIMEOUT_MS = 15000;
const STATES = ["running", "leased", "queued", "held", "succeeded", "failed", "cancelled"];
const METRICS = ["train/lm_loss", "train/exact_accuracy", "eval/exact_accuracy"];
const ACTIVE_STATES = ["queued", "leased", "running", "held"];
const ENDED_BADLY = ["preempted", "lost", "failed", "hung"];
const PALETTE = ["#2f6fde", "#e0702a", "#23955a", "#c2399c", "#9a7b12", "#d33d3d", "#1b9aaa", "#6f52c9", "#5f7a1f", "#7d5a50"];
const TOKEN_KEY = "podq-admin-token";

const ui = {
  // from the URL
  stateFilter: "",
  groupFilter: "",
  text: "",
  selected: null, // job id whose detail panel is open
  study: null, // group whose study view is open
  metric: "",
  xAxis: "step",
  smooth: 0,
  // data
  panelJob: null, // job id the panel's content belongs to
  jobs: [],
  jobsById: new Map(),
  listTotal: 0,
  groups: [],
  groupNames: "",
  status: null,
  plan: null,
  lastOk: null,
  // the study view's data
  studyData: null, // GET /groups/{name}/study
  runs: new Map(), // run id -> { detail, names: Set, series: Map(metric -> points), fetching }
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

/** One API call. Calls that change something carry the admin token when one was given. */
async function api(path, { method = "GET", body, timeoutMs = FETCH_TIMEOUT_MS } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
  }
  try {
    const resp = await fetch(API + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      signal: ctl.signal,
    });
    if (!resp.ok) {
      let message = `HTTP ${resp.status}`;
      try {
        const err = await resp.json();
        if (err && err.error && err.error.message) message = err.error.message;
      } catch (_) { /* not JSON */ }
      throw new HttpError(resp.status, message);
    }
    return await resp.json();
  } finally {
    clearTimeout(timer);
  }
}

const getJSON = (path) => api(path);

/** A state-changing call; a 401/403 asks for the admin token (kept for this tab only). */
async function adminCall(method, path, body) {
  try {
    return await api(path, { method, body: body === undefined ? {} : body });
  } catch (e) {
    if (e instanceof HttpError && (e.status === 401 || e.status === 403)) askForToken(e.message);
    throw e;
  }
}

function askForToken(reason) {
  const form = $("token-form");
  form.hidden = false;
  form.title = reason || "";
  $("token-input").focus();
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

const SVG_NS = "http://www.w3.org/2000/svg";

/** Creates an SVG element with attributes; a string child becomes its text. */
function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmtDate(iso, withYear = false) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleDateString([], withYear ? { year: "numeric", month: "short", day: "numeric" } : { month: "short", day: "numeric" });
}

// ---------- the page's state lives in the URL hash ----------
//
// #study=<group>&metric=<name>&x=step|hours&smooth=0.6&job=<id>&state=&group=&q=
// Opening a view or a job adds a history entry (back returns); changing a filter, the metric,
// the x axis or the smoothing replaces the current one (reload and links keep it).

function stateFromHash() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const smooth = Number(params.get("smooth"));
  return {
    stateFilter: params.get("state") || "",
    groupFilter: params.get("group") || "",
    text: params.get("q") || "",
    selected: params.get("job") || null,
    study: params.get("study") || null,
    metric: params.get("metric") || "",
    xAxis: params.get("x") === "hours" ? "hours" : "step",
    smooth: Number.isFinite(smooth) ? Math.max(0, Math.min(0.99, smooth)) : 0,
  };
}

function hashOf(state) {
  const params = new URLSearchParams();
  if (state.study) params.set("study", state.study);
  if (state.study && state.metric) params.set("metric", state.metric);
  if (state.study && state.xAxis !== "step") params.set("x", state.xAxis);
  if (state.study && state.smooth > 0) params.set("smooth", String(state.smooth));
  if (state.stateFilter) params.set("state", state.stateFilter);
  if (state.groupFilter) params.set("group", state.groupFilter);
  if (state.text) params.set("q", state.text);
  if (state.selected) params.set("job", state.selected);
  const hash = params.toString();
  return hash ? `#${hash}` : "";
}

/** Writes ui's state into the URL: a new history entry when `push`, else in place. */
function writeHash(push = false) {
  const hash = hashOf(ui);
  if (hash === location.hash || (hash === "" && location.hash === "")) return;
  const url = hash || location.pathname + location.search;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

function syncControls() {
  $("filter-state").value = ui.stateFilter;
  $("filter-text").value = ui.text;
  syncGroupSelect();
  $("study-x").value = ui.xAxis;
  $("study-smooth").value = String(ui.smooth);
  $("study-smooth-value").textContent = ui.smooth.toFixed(2);
}

function syncGroupSelect() {
  const select = $("filter-group");
  if (ui.groupFilter && ![...select.options].some((o) => o.value === ui.groupFilter)) {
    select.append(el("option", { value: ui.groupFilter }, ui.groupFilter));
  }
  select.value = ui.groupFilter;
}
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

/** The causes of pod time in display order, as the API names them (`${cause}_s`). */
const POD_TIME_CAUSES = ["provisioning", "setup", "startup", "restore", "productive", "save", "wasted", "stopping", "idle"];

/** One stacked bar of where `time` (a PodTime) went, each cause a segment as wide as its share. */
function podTimeBar(label, time) {
  const total = time && time.total_s > 0 ? time.total_s : 0;
  const row = el("div", { class: "pt-row", "data-pod-time": label, "data-total-s": String(total) },
    el("span", { class: "pt-label" }, label));
  const bar = el("div", { class: "pt-bar", role: "img" });
  const parts = [];
  for (const cause of POD_TIME_CAUSES) {
    const s = total ? time[`${cause}_s`] || 0 : 0;
    if (s <= 0) continue;
    const share = (100 * s) / total;
    parts.push(`${cause} ${fmtDuration(s * 1000)} (${share.toFixed(share < 1 ? 1 : 0)}%)`);
    bar.append(el("span", { class: `pt-seg pt-${cause}`, "data-cause": cause, "data-seconds": String(s),
      style: `width:${share.toFixed(3)}%`, title: `${cause}: ${fmtDuration(s * 1000)}` }));
  }
  bar.setAttribute("aria-label", total ? `${label}: ${parts.join(", ")}` : `${label}: no pod time yet`);
  row.append(bar, el("span", { class: "pt-total mono" }, total ? fmtDuration(total * 1000) : "–"));
  row.title = parts.join(" · ");
  return row;
}

function podTimeLegend() {
  return el("div", { class: "pt-legend" }, ...POD_TIME_CAUSES.map((c) =>
    el("span", { class: "pt-key" }, el("span", { class: `pt-swatch pt-${c}` }), c)));
}

function adviceText(a) {
  if (!a) return "";
  const how = a.auto ? "checkpoint_interval: auto, so each attempt follows the advice" : `advised ${fmtInt(a.interval_steps_advised)} steps`;
  return `Checkpoints every ${fmtInt(a.interval_steps_now)} steps; ${how} ` +
    `(save ${a.save_cost_s.toFixed(1)} s, ${a.save_cost_source}; pod MTBF ${fmtDuration(a.mtbf_s * 1000)}). ` +
    (a.auto ? "" : `The advised interval would save ${a.pod_hours_saved.toFixed(1)} pod-hours.`);
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
  ui.groups = groups;
  const tbody = $("groups-table").tBodies[0];
  tbody.replaceChildren(...groups.map((g) => el("tr", {
    "data-group": g.name,
    class: ui.groupFilter === g.name ? "selected" : null,
    tabindex: 0,
    title: `open ${g.name}`,
  },
  el("td", { class: "mono" }, el("a", { href: hashOf({ ...ui, study: g.name, selected: null, metric: "" }), class: "group-link", "data-open-study": g.name }, g.name)),
  el("td", { class: "title" }, g.title),
  el("td", { class: "num" }, String(g.experiments.length)),
  el("td", { class: "num muted" }, `${fmtNum(g.planned_hours)} h`),
  el("td", null, countsStrip(g.jobs)),
  el("td", null, el("button", {
    type: "button",
    class: "btn ghost small",
    "data-filter-group": g.name,
    "aria-pressed": ui.groupFilter === g.name ? "true" : "false",
    title: `show only ${g.name}'s jobs in the jobs table`,
  }, ui.groupFilter === g.name ? "all jobs" : "its jobs")))));

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

function stepCell(job) {
  return el("td", { class: "step" },
    el("span", { class: "mono" }, stepText(job.last_step, job.total_steps)),
    job.total_steps ? progressBar(job.last_step, job.total_steps) : null);
}

/** The message cell: why the last attempt ended (failed, requeued, held), and notes. */
function messageCell(job) {
  const message = job.message || "";
  const notes = [];
  if (job.same_as) notes.push(el("span", { class: "shares", "data-same-as": job.same_as },
    "shares run of ", jobLink(job.same_as)));
  if (job.not_before && new Date(job.not_before).getTime() > Date.now()) {
    notes.push(el("span", { class: "muted", title: job.not_before }, `backoff until ${fmtTime(job.not_before)}`));
  }
  const tone = ["failed", "held"].includes(job.state) ? " bad-text" : job.failures ? " warn-text" : "";
  return el("td", { class: "msg", title: message || null },
    ...notes, message ? el("span", { class: `reason${tone}`, "data-message": "" }, message) : null);
}

function jobRow(job) {
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
  stepCell(job),
  el("td", { class: "num" }, String(job.attempt_count)),
  el("td", { class: `num${job.preemptions ? " warn-text" : ""}` }, String(job.preemptions)),
  el("td", { class: `num${job.failures ? " bad-text" : ""}`, title: `${job.failures} of ${job.max_failures} allowed` },
    `${job.failures}/${job.max_failures}`),
  messageCell(job));
}

function renderJobs() {
  const tbody = $("jobs-table").tBodies[0];
  const shown = ui.jobs.filter(jobMatches);
  tbody.replaceChildren(...shown.map(jobRow));
  $("jobs-empty").hidden = shown.length !== 0;
  const total = Math.max(ui.listTotal, ui.jobs.length);
  let text = `${shown.length} of ${ui.jobs.length}`;
  if (total > ui.jobs.length) text += ` (server has ${total}; first ${ui.jobs.length} loaded)`;
  $("jobs-shown").textContent = `${text} jobs`;
}

/** Replaces one job's row in place (or re-renders when it enters or leaves the filter). */
function updateJobRow(job) {
  const tbody = $("jobs-table").tBodies[0];
  const row = [...tbody.rows].find((r) => r.dataset.jobId === job.id);
  if (row && jobMatches(job)) patchRow(row, jobRow(job));
  else if (row || jobMatches(job)) renderJobs();
}

/** Makes `row` look like `fresh`, replacing only the cells that differ (a click or the
 * keyboard focus on an unchanged cell survives an update). */
function patchRow(row, fresh) {
  for (const name of fresh.getAttributeNames()) {
    if (row.getAttribute(name) !== fresh.getAttribute(name)) row.setAttribute(name, fresh.getAttribute(name));
  }
  for (const name of row.getAttributeNames()) if (!fresh.hasAttribute(name)) row.removeAttribute(name);
  const cells = [...fresh.cells];
  cells.forEach((cell, i) => {
    const old = row.cells[i];
    if (!old) row.append(cell);
    else if (!old.isEqualNode(cell)) old.replaceWith(cell);
  });
  while (row.cells.length > cells.length) row.lastElementChild.remove();
}

function setJobs(list) {
  ui.jobs = list.jobs || [];
  ui.listTotal = list.total ?? ui.jobs.length;
  ui.jobsById = new Map(ui.jobs.map((j) => [j.id, j]));
}

/** Puts one job (from its detail) into the list, in submission order. */
function upsertJob(detail) {
  const fields = ["id", "experiment", "group", "state", "priority", "submitted_at", "updated_at",
    "checkpoint_dir", "resume_from", "last_step", "total_steps", "attempt_count", "failures",
    "max_failures", "preemptions", "same_as", "not_before", "message", "config_sha256"];
  const job = {};
  for (const f of fields) if (f in detail) job[f] = detail[f];
  if (job.attempt_count === undefined && Array.isArray(detail.attempts)) job.attempt_count = detail.attempts.length;
  const old = ui.jobsById.get(job.id);
  if (old) {
    Object.assign(old, job);
    return old;
  }
  ui.jobs.push(job);
  ui.listTotal += 1;
  ui.jobsById.set(job.id, job);
  return job;
}

// ---------- the plan card ----------

function fitOf(fit, total) {
  return fit === null || fit === undefined ? `– of ${total}` : `${fit} of ${total}`;
}

function runClass(run) {
  if (run.state === "succeeded") return "done";
  if (run.fits_deadline === true) return "fit";
  if (run.fits_deadline === false) return "late";
  if (["failed", "held", "cancelled"].includes(run.state)) return "norun";
  return "nodeadline";
}

/** Runs spread over lanes (one per pod) so that runs running at once do not overlap. */
function lanesOf(runs, pods) {
  const lanes = Array.from({ length: Math.max(1, pods) }, () => ({ end: -Infinity, runs: [] }));
  const sorted = [...runs].sort((a, b) => new Date(a.start) - new Date(b.start));
  for (const run of sorted) {
    const start = new Date(run.start).getTime();
    let lane = lanes.find((l) => l.end <= start + 1000);
    if (!lane) lane = lanes.reduce((a, b) => (a.end <= b.end ? a : b));
    lane.runs.push(run);
    lane.end = Math.max(lane.end, new Date(run.end).getTime());
  }
  return lanes.filter((l) => l.runs.length);
}

function renderTimeline(plan) {
  const svg = $("plan-timeline");
  const W = 720, L = 104, R = 14, T = 18, laneH = 13, gap = 10;
  const orders = [["Today", plan.current], ["Recommended", plan.recommended]];
  const now = new Date(plan.now).getTime();
  const deadline = plan.deadline ? new Date(plan.deadline).getTime() : null;
  let end = now + 3600e3;
  for (const [, proj] of orders) for (const r of proj.runs) end = Math.max(end, new Date(r.end).getTime());
  if (deadline) end = Math.max(end, deadline + (end - now) * 0.02);
  const sx = (t) => L + ((t - now) / (end - now)) * (W - L - R);
  const lanesByOrder = orders.map(([label, proj]) => [label, lanesOf(proj.runs.filter((r) => r.state !== "succeeded"), plan.pods)]);
  let y = T;
  const parts = [];
  for (const [label, lanes] of lanesByOrder) {
    const top = y;
    const rows = Math.max(1, lanes.length);
    parts.push(svgEl("text", { x: L - 8, y: top + (rows * laneH) / 2 + 4, class: "t-label", "text-anchor": "end" }, label));
    lanes.forEach((lane, i) => {
      for (const run of lane.runs) {
        const x0 = sx(new Date(run.start).getTime());
        const x1 = Math.max(x0 + 1, sx(new Date(run.end).getTime()));
        parts.push(svgEl("rect", {
          x: x0.toFixed(1), y: top + i * laneH + 1, width: Math.max(1, x1 - x0 - 0.6).toFixed(1), height: laneH - 2,
          class: `t-run ${runClass(run)}`, "data-order": label.toLowerCase(), "data-experiment": run.experiment,
        }, svgEl("title", null, `${run.experiment} (${run.group}): ${fmtDate(run.start)} → ${fmtDate(run.end)}, ` +
          `${fmtNum(run.remaining_hours)} pod-hours to go (${run.estimate === "measured" ? "measured rate" : "group.yaml estimate"})` +
          (run.fits_deadline === true ? ", fits" : run.fits_deadline === false ? ", ends after the deadline" : ""))));
      }
    });
    if (!lanes.length) parts.push(svgEl("text", { x: L + 4, y: top + laneH - 3, class: "t-tick" }, "nothing left to run"));
    y += rows * laneH + gap;
  }
  const H = y + 14;
  parts.push(svgEl("line", { x1: L, y1: T - 4, x2: L, y2: y - gap + 3, class: "t-axis" }));
  parts.push(svgEl("text", { x: L, y: H - 2, class: "t-tick", "text-anchor": "start" }, "now"));
  parts.push(svgEl("text", { x: W - R, y: H - 2, class: "t-tick", "text-anchor": "end" }, fmtDate(new Date(end).toISOString(), true)));
  if (deadline) {
    const x = sx(deadline);
    parts.push(svgEl("line", { x1: x, y1: T - 10, x2: x, y2: y - gap + 4, class: "t-deadline", "data-deadline": plan.deadline }));
    parts.push(svgEl("text", { x: x + 3, y: T - 8, class: "t-deadline-label", "text-anchor": x > W - 160 ? "end" : "start" },
      `deadline ${fmtDate(plan.deadline)}`));
  }
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren(...parts);
}

function renderPlan(plan) {
  ui.plan = plan;
  const card = $("plan");
  card.dataset.loaded = "true";
  card.dataset.deadline = plan.deadline || "";
  const runs = plan.current.runs.length;
  const groups = plan.groups.length;
  const deadlineBox = $("plan-deadline");
  if (plan.deadline) {
    const left = new Date(plan.deadline).getTime() - Date.now();
    const what = plan.grant && plan.grant.end === plan.deadline ? "grant ends" : "deadline";
    deadlineBox.replaceChildren(
      el("span", { class: "deadline-date", title: plan.deadline }, `${what} ${fmtDate(plan.deadline, true)}`),
      el("span", { class: "muted" }, ` · ${left > 0 ? `${fmtDuration(left)} left` : "passed"}`));
  } else {
    deadlineBox.replaceChildren(el("span", { class: "no-deadline" }, "no grant set"),
      el("span", { class: "muted" }, " · set one with PUT /api/v1/grant; until then nothing claims to fit"));
  }
  $("plan-runs-current").textContent = fitOf(plan.current.runs_fit, runs);
  $("plan-runs-recommended").textContent = fitOf(plan.recommended.runs_fit, runs);
  $("plan-groups-current").textContent = fitOf(plan.current.groups_fit, groups);
  $("plan-groups-recommended").textContent = fitOf(plan.recommended.groups_fit, groups);

  const est = plan.estimates || {};
  const notes = [];
  const measured = est.measured || 0, catalog = est.catalog || 0, done = est.done || 0;
  notes.push(`Estimates: ${measured} from measured step rates, ${catalog} from group.yaml hours` + (done ? `, ${done} done` : "") + ".");
  if (catalog > 0 && measured > 0) notes.push("Runs not measured yet use their group's planned hours, which a simulated pod does not follow.");
  else if (catalog > 0) notes.push("No run has a measured rate yet: the figures follow group.yaml, whatever the pod really does.");
  notes.push(`${fmtNum(plan.total_hours)} pod-hours to go on ${plan.pods} pod${plan.pods === 1 ? "" : "s"}` +
    (plan.capacity_hours !== null && plan.capacity_hours !== undefined ? `, ${fmtNum(plan.capacity_hours)} before the deadline` : "") +
    (plan.expected_waste_hours > 0 ? `, ${fmtNum(plan.expected_waste_hours)} of them work redone after interruptions` : "") +
    (plan.overhead_factor > 1.001 ? `, ×${plan.overhead_factor.toFixed(2)} for setup and start-up` : "") + ".");
  if (plan.pools && plan.pools.length > 1) {
    // Each accelerator type's runs go only to its own pods.
    notes.push(plan.pools.map((p) => `${p.accelerator}: ${p.pods} pod${p.pods === 1 ? "" : "s"}, ` +
      `${p.runs_to_go} runs, ${fmtNum(p.total_hours)} pod-hours to go` +
      (p.capacity_hours !== null && p.capacity_hours !== undefined ? `, ${fmtNum(p.capacity_hours)} of capacity` : "")).join("; ") + ".");
  }
  $("plan-notes").textContent = notes.join(" ");
  const advised = (plan.scenarios || []).find((s) => s.name === "advised_intervals");
  $("plan-advice").textContent = advised
    ? `At the advised checkpoint intervals: ${fmtNum(plan.pod_hours_saved_by_advice)} pod-hours saved, ` +
      `${fitOf(advised.runs_fit, runs)} runs and ${fitOf(advised.groups_fit, groups)} groups fit.`
    : "";
  refreshPodTime();
  const same = JSON.stringify(plan.current.runs.map((r) => r.experiment)) === JSON.stringify(plan.recommended.runs.map((r) => r.experiment));
  $("plan-apply").disabled = same;
  $("plan-apply").title = same ? "today's order is the recommended one" : "";

  renderTimeline(plan);

  const tbody = $("plan-groups").tBodies[0];
  tbody.replaceChildren(...plan.groups.map((g) => {
    const pct = g.runs ? (100 * g.runs_done) / g.runs : 0;
    const endCell = (end, fits) => el("td", { class: `plan-end ${fits === true ? "fit" : fits === false ? "late" : ""}`, "data-fits": fits === null || fits === undefined ? "" : String(fits) },
      end ? fmtDate(end) : "–", fits === true ? " ✓" : fits === false ? " ✗" : "");
    return el("tr", { "data-group": g.name, tabindex: 0, title: `open ${g.name}` },
      el("td", { class: "mono" }, g.name),
      el("td", { class: "plan-done" },
        el("span", { class: "mono" }, `${g.runs_done}/${g.runs}`),
        el("div", { class: "progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": g.runs, "aria-valuenow": g.runs_done },
          el("div", { class: "fill", style: `width:${pct.toFixed(1)}%` }))),
      endCell(g.end_current, g.fits_current),
      endCell(g.end_recommended, g.fits_recommended));
  }));
}

/** The grant's and each pod's split, under the plan. */
async function refreshPodTime() {
  try {
    const report = await getJSON("/pod-time");
    $("plan-pod-time").replaceChildren(podTimeBar("grant", report.grant),
      ...Object.entries(report.pods || {}).map(([name, time]) => podTimeBar(`pod ${name}`, time)),
      podTimeLegend());
  } catch (e) {
    $("plan-pod-time").replaceChildren(el("p", { class: "muted" }, `Could not load the pod time: ${e.message}`));
  }
}

let planInFlight = false;
let planLoadedAt = 0;
let planTimer = null;

async function refreshPlan() {
  if (planInFlight) return;
  planInFlight = true;
  try {
    renderPlan(await getJSON("/plan"));
    planLoadedAt = Date.now();
  } catch (e) {
    $("plan-notes").textContent = `Could not load the plan: ${e.message}`;
  } finally {
    planInFlight = false;
  }
}

/** Refreshes the plan after a change of state, at most once per PLAN_MIN_GAP_MS. */
function schedulePlan() {
  if (planTimer) return;
  const wait = Math.max(500, planLoadedAt + PLAN_MIN_GAP_MS - Date.now());
  planTimer = setTimeout(() => { planTimer = null; refreshPlan(); }, wait);
}

async function applyPlan() {
  $("plan-apply-confirm").hidden = true;
  $("plan-apply").hidden = false;
  const status = $("plan-apply-status");
  status.textContent = "applying…";
  try {
    const applied = await adminCall("POST", "/plan/apply");
    renderPlan(applied.plan);
    planLoadedAt = Date.now();
    const n = applied.submitted.length;
    status.textContent = `Applied: ${applied.reprioritised} job${applied.reprioritised === 1 ? "" : "s"} reprioritised` +
      (n ? `, ${n} experiment${n === 1 ? "" : "s"} submitted.` : ".");
    status.dataset.result = "applied";
    fullRefresh().catch(() => {});
  } catch (e) {
    status.textContent = `Not applied: ${e.message}`;
    status.dataset.result = "error";
  }
}

// ---------- the study view: a group's runs side by side ----------

const SERIES_POINTS = 1000;
const SERIES_MIN_GAP_MS = 2500;

function runOf(runId) {
  let run = ui.runs.get(runId);
  if (!run) {
    run = { id: runId, detail: null, series: new Map(), fetchedAt: new Map(), timers: new Map() };
    ui.runs.set(runId, run);
  }
  return run;
}

/** The study's rows that have a run, one per run (two experiments with one config share it). */
function studyRuns() {
  if (!ui.studyData) return [];
  const seen = new Set();
  const out = [];
  for (const row of ui.studyData.rows) {
    if (!row.run_id || seen.has(row.run_id)) continue;
    seen.add(row.run_id);
    out.push(row);
  }
  return out;
}

function studyConcerns(jobId) {
  return Boolean(ui.studyData && ui.studyData.rows.some((r) => r.job_id === jobId || r.run_id === jobId));
}

function recordedMetrics() {
  const names = new Set();
  for (const row of studyRuns()) {
    const run = ui.runs.get(row.run_id);
    if (!run) continue;
    if (run.detail && run.detail.latest_metrics) for (const n of Object.keys(run.detail.latest_metrics)) names.add(n);
    for (const [n, pts] of run.series) if (pts.length) names.add(n);
  }
  return names;
}

function effectiveMetric() {
  if (ui.metric) return ui.metric;
  const watch = (ui.studyData && ui.studyData.metrics_to_watch) || [];
  const recorded = recordedMetrics();
  return watch.find((m) => recorded.has(m)) || watch[0] || [...recorded].sort()[0] || "train/lm_loss";
}

async function fetchRunDetail(runId) {
  const run = runOf(runId);
  run.detail = await getJSON(`/jobs/${encodeURIComponent(runId)}`);
  return run;
}

async function fetchSeries(runId, metric) {
  const run = runOf(runId);
  const answer = await getJSON(`/jobs/${encodeURIComponent(runId)}/metrics?names=${encodeURIComponent(metric)}&max_points=${SERIES_POINTS}`);
  const series = (answer.series || []).find((s) => s.name === metric);
  run.series.set(metric, series ? series.points.filter((p) => Number.isFinite(p.value)) : []);
  run.fetchedAt.set(metric, Date.now());
  return run;
}

/** Fetches one run's series again after new metrics, at most once per SERIES_MIN_GAP_MS. */
function scheduleSeries(runId) {
  const run = runOf(runId);
  const metric = effectiveMetric();
  if (run.timers.get("series")) return;
  const wait = Math.max(50, (run.fetchedAt.get(metric) || 0) + SERIES_MIN_GAP_MS - Date.now());
  run.timers.set("series", setTimeout(async () => {
    run.timers.set("series", null);
    if (!ui.study) return;
    try {
      await fetchSeries(runId, effectiveMetric());
      renderStudyChart();
    } catch (_) { /* the next event or poll tries again */ }
  }, wait));
}

async function loadStudy() {
  const name = ui.study;
  if (!name) return;
  let data;
  try {
    data = await getJSON(`/groups/${encodeURIComponent(name)}/study`);
  } catch (e) {
    if (!(e instanceof HttpError) || ui.study !== name) throw e;
    $("study-error").textContent = e.status === 404 ? `There is no group ${name}.` : `Could not load the group: ${e.message}`;
    $("study-error").hidden = false;
    return;
  }
  if (ui.study !== name) return;
  $("study-error").hidden = true;
  ui.studyData = data;
  const rows = studyRuns();
  await Promise.all(rows.map((r) => fetchRunDetail(r.run_id).catch(() => null)));
  const metric = effectiveMetric();
  await Promise.all(rows.map((r) => fetchSeries(r.run_id, metric).catch(() => null)));
  if (ui.study !== name) return;
  renderStudy();
}

let studyTimer = null;
/** Reloads the study (rows, states, attempts) soon after an event that concerns it. */
function scheduleStudy() {
  if (studyTimer) return;
  studyTimer = setTimeout(() => { studyTimer = null; loadStudy().catch(() => {}); }, 400);
}

function renderStudy() {
  const data = ui.studyData;
  if (!data) return;
  const view = $("study-view");
  view.dataset.group = data.group;
  $("study-title").textContent = `${data.group} · ${data.title}`;
  $("study-sub").textContent = data.varies ? `varies ${data.varies}` : "";
  $("study-varies").textContent = data.baseline_row ? `baseline row: ${data.baseline_row}` : "";

  // the metric choice: the ones to watch first, then every other recorded one
  const recorded = recordedMetrics();
  const watch = data.metrics_to_watch || [];
  const names = [...watch, ...[...recorded].filter((n) => !watch.includes(n)).sort()];
  const metric = effectiveMetric();
  if (!names.includes(metric)) names.unshift(metric);
  const select = $("study-metric");
  const optionsKey = names.join("\n");
  if (select.dataset.options !== optionsKey) {
    select.dataset.options = optionsKey;
    select.replaceChildren(...names.map((n) => el("option", { value: n },
      n + (watch.includes(n) ? " ★" : "") + (recorded.has(n) ? "" : " (not recorded yet)"))));
  }
  select.value = metric;
  renderStudyChart();
  renderStudyTable();
}

/** Exponential moving average, debiased as TensorBoard's smoothing. */
function smoothed(points, weight) {
  if (!(weight > 0)) return points;
  let last = 0;
  let n = 0;
  return points.map((p) => {
    n += 1;
    last = last * weight + (1 - weight) * p.value;
    return { ...p, value: last / (1 - weight ** n) };
  });
}

/**
 * Where each attempt sits on the run's pod-time axis: a step inside an attempt maps to the
 * attempt's start (after its set-up) plus its share of the attempt's running time. An
 * attempt covers the steps from the one it resumed at (`start_step`) to the last it reported
 * (`end_step`, kept current while it runs).
 */
function attemptSpans(detail) {
  const attempts = [...((detail && detail.attempts) || [])].sort((a, b) => a.attempt - b.attempt);
  const now = Date.now();
  let cum = 0;
  return attempts.map((a) => {
    const t0 = new Date(a.started_at).getTime();
    const tr = a.running_at ? Math.max(t0, new Date(a.running_at).getTime()) : t0;
    const t1 = a.ended_at ? new Date(a.ended_at).getTime() : now;
    const s0 = a.start_step ?? stepOfResume(a.resume_from) ?? 0;
    const s1 = Math.max(s0, a.end_step ?? s0);
    const span = { attempt: a, base: cum, lead: Math.max(0, tr - t0), run: Math.max(0, t1 - tr), s0, s1 };
    cum += Math.max(0, t1 - t0);
    return span;
  });
}

function stepOfResume(uri) {
  if (!uri) return null;
  const last = String(uri).replace(/\/+$/, "").split("/").pop();
  return /^\d+$/.test(last) ? Number(last) : null;
}

/**
 * Pod-hours of the run when it was at `step`: in the latest attempt that covered the step
 * (a step redone after a resume belongs to the attempt that redid it; one lost to a
 * preemption and not redone yet, to the attempt that lost it).
 */
function hoursAt(spans, step) {
  if (!spans.length) return null;
  const covering = [...spans].reverse();
  const s = covering.find((x) => x.s0 <= step && step <= x.s1) || covering.find((x) => x.s0 <= step) || spans[0];
  const frac = s.s1 > s.s0 ? Math.max(0, Math.min(1, (step - s.s0) / (s.s1 - s.s0))) : 1;
  return (s.base + s.lead + frac * s.run) / 3600e3;
}

/** The drawn point a marker sits on: the last one at or before `x`, or the first after. */
function pointNear(points, x, after) {
  if (!points.length) return null;
  if (after) return points.find((p) => p.x >= x) || points[points.length - 1];
  let found = points[0];
  for (const p of points) if (p.x <= x) found = p;
  return found;
}

function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function renderStudyChart() {
  const svg = $("study-chart");
  const data = ui.studyData;
  if (!data) return;
  const metric = effectiveMetric();
  const hours = ui.xAxis === "hours";
  const W = 960, H = 380, L = 64, R = 18, T = 16, B = 44;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.dataset.metric = metric;
  svg.dataset.x = ui.xAxis;
  svg.dataset.smooth = String(ui.smooth);

  const rows = studyRuns();
  const curves = [];
  rows.forEach((row, i) => {
    const run = ui.runs.get(row.run_id);
    const raw = (run && run.series.get(metric)) || [];
    const color = PALETTE[i % PALETTE.length];
    const spans = attemptSpans(run && run.detail);
    // Points in drawing order (by pod-time when the x axis is pod-hours), then smoothed.
    let placed = raw.map((p) => ({ x: hours ? hoursAt(spans, p.step) : p.step, step: p.step, value: p.value }))
      .filter((p) => p.x !== null);
    if (hours) placed.sort((a, b) => a.x - b.x || a.step - b.step);
    const pts = smoothed(placed, ui.smooth).map((p, k) => ({ x: p.x, y: p.value, step: p.step, raw: placed[k].value }));
    const marks = [];
    spans.forEach((span, k) => {
      const a = span.attempt;
      if (!ENDED_BADLY.includes(a.outcome) || !pts.length) return;
      const stopStep = a.end_step ?? span.s1;
      const stopX = hours ? (span.base + span.lead + span.run) / 3600e3 : stopStep;
      marks.push({ kind: a.outcome, role: "stop", step: stopStep, x: stopX, y: pointNear(pts, stopX, false).y,
        title: `${row.experiment}: attempt ${a.attempt} ${a.outcome} at step ${fmtInt(stopStep)}${a.message ? ` (${a.message})` : ""}` });
      const next = spans[k + 1];
      if (!next) return;
      const resume = next.attempt.start_step ?? stepOfResume(next.attempt.resume_from);
      if (resume === null || resume === undefined) return;
      const resumeX = hours ? (next.base + next.lead) / 3600e3 : resume;
      marks.push({ kind: "resume", role: "resume", step: resume, x: resumeX, y: pointNear(pts, resumeX, true).y,
        title: `${row.experiment}: attempt ${next.attempt.attempt} resumed from step ${fmtInt(resume)}` });
    });
    curves.push({ row, color, pts, marks });
  });

  const all = curves.flatMap((c) => c.pts);
  const marksAll = curves.flatMap((c) => c.marks);
  const parts = [];
  svg.setAttribute("aria-label", `${metric} against ${hours ? "pod-hours" : "step"} for ${curves.filter((c) => c.pts.length).length} runs`);
  if (!all.length) {
    parts.push(svgEl("text", { x: W / 2, y: H / 2, class: "c-empty", "text-anchor": "middle" },
      rows.length ? `no ${metric} points yet` : "no run of this group has started"));
    svg.replaceChildren(...parts);
    renderLegend(curves);
    return;
  }
  let x0 = Math.min(...all.map((p) => p.x), ...marksAll.map((m) => m.x));
  let x1 = Math.max(...all.map((p) => p.x), ...marksAll.map((m) => m.x));
  if (!hours) x0 = Math.min(0, x0);
  else x0 = 0;
  let y0 = Math.min(...all.map((p) => Math.min(p.y, p.raw))), y1 = Math.max(...all.map((p) => Math.max(p.y, p.raw)));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { const d = Math.abs(y0) * 0.05 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.04;
  y0 -= pad; y1 += pad;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);

  for (const v of niceTicks(y0, y1)) {
    parts.push(svgEl("line", { x1: L, y1: sy(v).toFixed(1), x2: W - R, y2: sy(v).toFixed(1), class: "c-grid" }));
    parts.push(svgEl("text", { x: L - 6, y: (sy(v) + 3).toFixed(1), class: "c-label", "text-anchor": "end" }, fmtNum(v)));
  }
  for (const v of niceTicks(x0, x1, 6)) {
    parts.push(svgEl("line", { x1: sx(v).toFixed(1), y1: H - B, x2: sx(v).toFixed(1), y2: H - B + 4, class: "c-axis" }));
    parts.push(svgEl("text", { x: sx(v).toFixed(1), y: H - B + 16, class: "c-label", "text-anchor": "middle" }, hours ? fmtNum(v) : fmtInt(v)));
  }
  parts.push(svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "c-axis" }));
  parts.push(svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, class: "c-axis" }));
  parts.push(svgEl("text", { x: (L + W - R) / 2, y: H - 6, class: "c-axis-title", "text-anchor": "middle" }, hours ? "pod-hours" : "step"));
  parts.push(svgEl("text", { x: 12, y: (T + H - B) / 2, class: "c-axis-title", "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, metric));

  for (const c of curves) {
    const g = svgEl("g", {
      class: "curve", "data-experiment": c.row.experiment, "data-job-id": c.row.run_id,
      "data-points": c.pts.length, "data-last-step": c.pts.length ? c.pts[c.pts.length - 1].step : "",
      style: `--curve:${c.color}`,
    }, svgEl("title", null, c.row.experiment));
    if (c.pts.length) {
      if (ui.smooth > 0) {
        const rawPts = c.pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.raw).toFixed(1)}`).join(" ");
        g.append(svgEl("polyline", { points: rawPts, class: "s-raw" }));
      }
      g.append(svgEl("polyline", { points: c.pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" "), class: "s-line" }));
      const last = c.pts[c.pts.length - 1];
      g.append(svgEl("circle", { cx: sx(last.x).toFixed(1), cy: sy(last.y).toFixed(1), r: 3, class: "s-dot" }));
    }
    for (const m of c.marks) {
      const x = sx(m.x), y = sy(m.y);
      const attrs = { class: `mark mark-${m.role}`, "data-marker": m.kind, "data-step": m.step, "data-job-id": c.row.run_id };
      const shape = m.role === "stop"
        ? svgEl("path", { ...attrs, d: `M${(x - 5).toFixed(1)},${(y - 11).toFixed(1)} h10 l-5,8 z` })
        : svgEl("circle", { ...attrs, cx: x.toFixed(1), cy: y.toFixed(1), r: 4.5 });
      shape.append(svgEl("title", null, m.title));
      g.append(shape);
    }
    parts.push(g);
  }
  svg.replaceChildren(...parts);
  renderLegend(curves);
}

function paramsText(row) {
  const entries = Object.entries(row.params || {});
  if (row.baseline) return "baseline";
  if (!entries.length) return "same config as the baseline";
  return entries.map(([k, v]) => `${k.split(".").pop()}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
}

function renderLegend(curves) {
  $("study-legend").replaceChildren(...curves.map((c) => el("li", { "data-experiment": c.row.experiment, style: `--curve:${c.color}` },
    el("span", { class: "swatch", "aria-hidden": "true" }),
    el("a", { href: "#", "data-open-job": c.row.job_id || c.row.run_id }, c.row.experiment),
    el("span", { class: "muted" }, ` ${paramsText(c.row)} `),
    badge(c.row.state),
    c.marks.length ? el("span", { class: "warn-text small" }, ` ${c.marks.filter((m) => m.role === "stop").length} interrupted`) : null)));
}

function paramValue(v) {
  if (v === null || v === undefined) return "";
  return typeof v === "string" ? v : JSON.stringify(v);
}

function renderStudyTable() {
  const data = ui.studyData;
  const table = $("study-table");
  const keys = [...new Set(data.rows.flatMap((r) => Object.keys(r.params || {})))].sort();
  const watch = data.metrics_to_watch || [];
  const metrics = [...watch.filter((m) => m.startsWith("eval/")), ...watch.filter((m) => !m.startsWith("eval/"))];
  table.tHead.replaceChildren(el("tr", null,
    el("th", null, "Experiment"), el("th", null, "State"),
    ...keys.map((k) => el("th", { "data-param": k, title: k }, k)),
    ...metrics.flatMap((m) => [el("th", { class: "num", "data-metric": m, title: `${m}: the newest point` }, `${m} final`),
      el("th", { class: "num", "data-metric": m, title: `${m}: the best point (lowest for a loss)` }, `${m} best`)]),
    el("th", { class: "num", title: "attempts" }, "Att."), el("th", { class: "num", title: "preemptions" }, "Pre."),
    el("th", null, "Message")));
  const metricCell = (mv) => el("td", { class: "num mono", title: mv ? `step ${fmtInt(mv.step)}` : null }, mv ? fmtNum(mv.value) : "–");
  table.tBodies[0].replaceChildren(...data.rows.map((r) => el("tr", {
    "data-experiment": r.experiment, "data-baseline": r.baseline ? "true" : "false", "data-job-id": r.job_id || "",
    class: r.baseline ? "baseline" : null,
  },
  el("td", { class: "exp" }, r.job_id ? el("a", { href: "#", "data-open-job": r.job_id }, r.experiment) : r.experiment,
    r.baseline ? el("span", { class: "pill" }, "baseline") : null),
  el("td", null, badge(r.state)),
  ...keys.map((k) => el("td", { class: "mono", "data-param": k },
    k in (r.params || {}) ? paramValue(r.params[k]) : el("span", { class: "muted" }, "= baseline"))),
  ...metrics.flatMap((m) => [metricCell(r.final && r.final[m]), metricCell(r.best && r.best[m])]),
  el("td", { class: "num" }, String(r.attempts ?? 0)),
  el("td", { class: `num${r.preemptions ? " warn-text" : ""}` }, String(r.preemptions ?? 0)),
  el("td", { class: "msg", title: r.message || null }, r.message || ""))));
}

function showView() {
  const study = Boolean(ui.study);
  $("overview-view").hidden = study;
  $("study-view").hidden = !study;
  document.body.dataset.view = study ? "study" : "overview";
  document.title = study ? `${ui.study} · podq` : "podq";
}

function openStudy(name) {
  if (!ui.studyData || ui.studyData.group !== name) {
    ui.studyData = null;
    ui.runs = new Map();
    $("study-chart").replaceChildren();
    $("study-legend").replaceChildren();
    $("study-table").tHead.replaceChildren();
    $("study-table").tBodies[0].replaceChildren();
    $("study-title").textContent = name;
    $("study-sub").textContent = "";
    $("study-metric").dataset.options = "";
  }
  ui.study = name;
  showView();
  window.scrollTo(0, 0);
  loadStudy().catch((e) => setConn(false, e));
}

function closeStudy() {
  ui.study = null;
  ui.studyData = null;
  ui.runs = new Map();
  showView();
}

// ---------- the job detail panel ----------

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
  setDetailActions(detail.state);

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
    ...fact(detail.state === "succeeded" ? "Last checkpoint" : "Next resume from", detail.resume_from, "mono wrap"),
    ...fact("Config", detail.config_sha256 ? detail.config_sha256.slice(0, 16) : null, "mono"));

  $("detail-pod-time").replaceChildren(podTimeBar("run", detail.pod_time),
    ...[...attempts].sort((a, b) => a.attempt - b.attempt).map((a) => podTimeBar(`attempt ${a.attempt}`, a.pod_time)),
    podTimeLegend());
  $("detail-advice").textContent = adviceText(detail.checkpoint_advice);

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
    // This attempt's own resume point, never the job's next one.
    el("td", { class: "mono resume", "data-resume-from": a.resume_from || "", title: a.resume_from || null },
      a.resume_from ? `step ${stepOfResume(a.resume_from) ?? a.resume_from}` : el("span", { class: "muted" }, "start")),
    el("td", null, timeCell(a.started_at)),
    el("td", null, a.ended_at ? timeCell(a.ended_at) : "–"),
    el("td", { class: "msg", title: a.message || null }, a.message || ""),
  )) : [el("tr", null, el("td", { colspan: 8, class: "muted" }, "No attempts yet."))]));

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
    setLogChoices(detail);
    if (logView.key !== logQueryKey() || (!logView.timer && !logView.busy && $("log-follow").checked)) pollLog();
    if (ui.jobsById.has(detail.id)) updateJobRow(upsertJob(detail));
  } catch (e) {
    if (!(e instanceof HttpError)) throw e;
    if (ui.selected !== id) return;
    $("detail-error").textContent = e.status === 404 ? "This job no longer exists." : `Could not load the job: ${e.message}`;
    $("detail-error").hidden = false;
  }
}

function setDetailActions(state) {
  const cancellable = ACTIVE_STATES.includes(state);
  $("detail-cancel").hidden = !cancellable || !$("detail-cancel-confirm").hidden;
  if (!cancellable) $("detail-cancel-confirm").hidden = true;
  $("detail-requeue").hidden = !["failed", "held", "cancelled"].includes(state);
}

async function jobAction(action) {
  const id = ui.selected;
  if (!id) return;
  const status = $("detail-action-status");
  status.textContent = action === "cancel" ? "cancelling…" : "requeueing…";
  $("detail-cancel-confirm").hidden = true;
  try {
    const answer = await adminCall("POST", `/jobs/${encodeURIComponent(id)}/${action}`);
    status.textContent = action === "cancel"
      ? (answer && answer.state === "cancelled" ? "Cancelled." : "Cancel requested: every host is being stopped.")
      : "Requeued.";
    await refreshJob(id);
    scheduleStatus();
  } catch (e) {
    status.textContent = `${action === "cancel" ? "Not cancelled" : "Not requeued"}: ${e.message}`;
  }
}

function openJob(id, push = true) {
  if (!id) return;
  const changed = ui.panelJob !== id;
  const was = ui.selected;
  ui.selected = id;
  ui.panelJob = id;
  writeHash(push && was !== id);
  const panel = $("job-detail");
  if (changed) {
    const job = ui.jobsById.get(id);
    $("detail-experiment").textContent = job ? job.experiment : "…";
    $("detail-state").replaceChildren(job ? badge(job.state) : "");
    $("detail-sub").textContent = job ? `${job.group} · ${job.id}` : id;
    for (const part of ["detail-facts", "detail-charts", "detail-latest", "detail-events"]) $(part).replaceChildren();
    for (const t of ["detail-attempts", "detail-checkpoints"]) $(t).tBodies[0].replaceChildren();
    $("detail-body").scrollTop = 0;
    $("detail-action-status").textContent = "";
    $("detail-cancel-confirm").hidden = true;
    setDetailActions(job ? job.state : null);
  }
  panel.hidden = false;
  $("detail-backdrop").hidden = false;
  document.body.classList.add("detail-open");
  markSelectedRows();
  refreshDetail().catch(() => setConn(false));
}

// ---------- the job panel's live log ----------

/** Lines the log view holds at most; the oldest leave first. */
const LOG_VIEW_LINES = 3000;
const LOG_POLL_MS = 1000;
const logView = { key: null, after: null, lines: 0, timer: null, busy: false };

function logQueryKey() {
  return [ui.panelJob, $("log-host").value, $("log-attempt").value, $("log-grep").value].join("\u0000");
}

/** Host and attempt choices: the pods' hosts and the job's attempts, keeping the selection. */
function setLogChoices(detail) {
  const pods = (ui.status && ui.status.pods) || [];
  const hosts = Math.max(1, ...pods.map((p) => p.hosts || 0));
  const hostSel = $("log-host");
  if (hostSel.options.length !== hosts + 1) {
    const keep = hostSel.value;
    hostSel.replaceChildren(el("option", { value: "all" }, "all"),
      ...Array.from({ length: hosts }, (_, i) => el("option", { value: String(i) }, String(i))));
    hostSel.value = [...hostSel.options].some((o) => o.value === keep) ? keep : "all";
  }
  const attempts = (detail.attempts || []).map((a) => a.attempt);
  const attemptSel = $("log-attempt");
  if (attemptSel.options.length !== attempts.length + 1) {
    const keep = attemptSel.value;
    attemptSel.replaceChildren(el("option", { value: "" }, "all"),
      ...attempts.map((n) => el("option", { value: String(n) }, String(n))));
    attemptSel.value = [...attemptSel.options].some((o) => o.value === keep) ? keep : "";
  }
}

/** Reads what is new in the open job's log and appends it; starts with the newest lines. */
async function pollLog() {
  clearTimeout(logView.timer);
  logView.timer = null;
  const id = ui.panelJob;
  if (!id || $("job-detail").hidden) return;
  const pre = $("detail-log");
  const key = logQueryKey();
  if (key !== logView.key) {
    logView.key = key;
    logView.after = null;
    logView.lines = 0;
    pre.replaceChildren();
    $("log-status").textContent = "";
  }
  if (logView.busy) return;
  logView.busy = true;
  let again = false;
  try {
    const q = new URLSearchParams();
    q.set("host", $("log-host").value);
    if ($("log-attempt").value) q.set("attempt", $("log-attempt").value);
    if ($("log-grep").value) q.set("grep", $("log-grep").value);
    if (logView.after === null) { q.set("tail", "true"); q.set("limit", "500"); } else { q.set("after", String(logView.after)); q.set("limit", "2000"); }
    const page = await getJSON(`/jobs/${encodeURIComponent(id)}/logs?${q}`);
    if (key !== logQueryKey()) return; // the query changed meanwhile
    const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
    if (logView.after === null) {
      for (const d of page.dropped || []) {
        pre.append(el("div", { class: "log-note" }, `attempt ${d.attempt} host ${d.host}: ${fmtInt(d.lines)} older lines dropped (the server keeps the newest ${fmtInt(page.kept_per_host)} per attempt and host)`));
      }
    }
    for (const line of page.lines) {
      pre.append(el("div", { class: "log-line", "data-host": String(line.host), "data-attempt": String(line.attempt) },
        el("span", { class: "log-where" }, `[a${line.attempt} h${line.host}] `), line.text));
    }
    logView.lines += page.lines.length;
    while (pre.childElementCount > LOG_VIEW_LINES) pre.firstElementChild.remove();
    logView.after = page.next_after;
    if (atBottom) pre.scrollTop = pre.scrollHeight;
    $("log-status").textContent = logView.lines === 0 ? "no lines yet" : `${fmtInt(logView.lines)} lines`;
    again = page.more;
  } catch (e) {
    if (key === logQueryKey()) $("log-status").textContent = e instanceof HttpError ? e.message : "cannot reach the server";
  } finally {
    logView.busy = false;
  }
  if (again) { pollLog(); return; }
  if ($("log-follow").checked && ui.panelJob === id) logView.timer = setTimeout(pollLog, LOG_POLL_MS);
}

function closeJob(push = true) {
  clearTimeout(logView.timer);
  logView.timer = null;
  logView.key = null;
  ui.selected = null;
  ui.panelJob = null;
  writeHash(push);
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


// ---------- keeping the page current ----------

const live = {
  mode: POLL_MS ? "poll" : "connecting", // live | fallback | poll | connecting
  source: null,
  fallbackTimer: null,
  lastEventId: null,
};

function setConn(ok, error) {
  const conn = $("conn");
  conn.dataset.ok = ok ? "true" : "false";
  conn.dataset.mode = live.mode;
  document.body.dataset.status = ok ? "ok" : "error";
  $("live-mode").textContent = {
    live: "live",
    fallback: `stream lost, refreshing every ${FALLBACK_POLL_MS / 1000} s ·`,
    poll: `polling every ${fmtDuration(POLL_MS)} ·`,
    connecting: "",
  }[live.mode];
  if (live.mode === "live") $("live-mode").textContent = "live ·";
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

function renderStatus(status) {
  ui.status = status;
  renderCounts(status.jobs);
  renderQueue(status);
  renderGoodput(status.goodput);
  renderPods(status.pods);
  renderRunning(status.running);
}

/** Everything the current view shows, fetched again. */
async function fullRefresh() {
  const [status, groups, list] = await Promise.all([
    getJSON("/status"),
    getJSON("/groups"),
    getJSON("/jobs?limit=1000"),
  ]);
  setJobs(list);
  renderStatus(status);
  renderGroups(groups);
  renderJobs();
  const more = [];
  if (ui.selected) more.push(refreshDetail());
  if (ui.study) more.push(loadStudy());
  await Promise.all(more);
}

let inFlight = false;
async function tick() {
  if (inFlight) return;
  inFlight = true;
  try {
    await fullRefresh();
    setConn(true);
  } catch (e) {
    setConn(false, e);
  } finally {
    inFlight = false;
  }
}

/** The old behaviour, kept behind `?poll=<ms>`: a full refresh every POLL_MS. */
async function pollLoop() {
  await tick();
  setTimeout(pollLoop, POLL_MS);
}

// Debounced refetches: many events about one thing cost one request.
const pending = { jobs: new Set(), timers: {}, detailAt: 0 };

function debounce(name, ms, fn) {
  if (pending.timers[name]) return;
  pending.timers[name] = setTimeout(() => {
    pending.timers[name] = null;
    fn().then(() => setConn(true), (e) => setConn(false, e));
  }, ms);
}

function scheduleStatus() {
  debounce("status", 300, async () => renderStatus(await getJSON("/status")));
}

function scheduleGroups() {
  debounce("groups", 1000, async () => {
    renderGroups(await getJSON("/groups"));
  });
}

async function refreshJob(id) {
  try {
    const detail = await getJSON(`/jobs/${encodeURIComponent(id)}`);
    const isNew = !ui.jobsById.has(detail.id);
    const job = upsertJob(detail);
    if (isNew) renderJobs();
    else updateJobRow(job);
    if (ui.selected === id) setDetailActions(job.state);
  } catch (e) {
    if (!(e instanceof HttpError)) throw e;
  }
}

function scheduleJob(id) {
  pending.jobs.add(id);
  debounce("jobs", 250, async () => {
    const ids = [...pending.jobs];
    pending.jobs.clear();
    if (ids.length > 20) {
      // A whole submission: one list call beats many job calls.
      setJobs(await getJSON("/jobs?limit=1000"));
      renderJobs();
    } else {
      await Promise.all(ids.map(refreshJob));
    }
  });
}

/** Refreshes the open job's panel, at most once per `minGapMs`. */
function scheduleDetail(minGapMs = 0) {
  if (pending.timers.detail) return;
  const wait = Math.max(250, pending.detailAt + minGapMs - Date.now());
  pending.timers.detail = setTimeout(() => {
    pending.timers.detail = null;
    pending.detailAt = Date.now();
    refreshDetail().catch((e) => setConn(false, e));
  }, wait);
}

/** One event of the job timeline (the same shape as GET /jobs/{id}/events' items). */
function onStreamEvent(ev) {
  if (ev.job_id) {
    scheduleJob(ev.job_id);
    // Jobs linked to this run share its state.
    for (const j of ui.jobs) if (j.same_as === ev.job_id) scheduleJob(j.id);
    if (ui.selected === ev.job_id || (ui.jobsById.get(ui.selected) || {}).same_as === ev.job_id) scheduleDetail();
    if (ui.study && studyConcerns(ev.job_id)) scheduleStudy();
    if (ev.kind !== "checkpoint") scheduleGroups();
  }
  if (ev.kind !== "checkpoint") {
    scheduleStatus();
    schedulePlan();
  }
}

/** New metrics of a running job: its step moves; charts that show it fetch again. */
function onProgress(p) {
  const ids = [p.job_id, ...ui.jobs.filter((j) => j.same_as === p.job_id).map((j) => j.id)];
  for (const id of ids) {
    const job = ui.jobsById.get(id);
    if (job && Number.isFinite(p.step) && (job.last_step ?? -1) < p.step) {
      job.last_step = p.step;
      updateJobRow(job);
    }
  }
  const running = ui.status && (ui.status.running || []).find((r) => r.job_id === p.job_id);
  if (running && (running.step ?? -1) < p.step) {
    running.step = p.step;
    renderRunning(ui.status.running);
  }
  if (ids.includes(ui.selected)) scheduleDetail(5000);
  if (ui.study && studyConcerns(p.job_id)) scheduleSeries(p.job_id);
}

function startFallback() {
  if (live.fallbackTimer) return;
  live.fallbackTimer = setTimeout(function again() {
    tick();
    live.fallbackTimer = setTimeout(again, FALLBACK_POLL_MS);
  }, 5000);
}

function stopFallback() {
  clearTimeout(live.fallbackTimer);
  live.fallbackTimer = null;
}

function connectStream() {
  const source = new EventSource(`${API}/events/stream`);
  live.source = source;
  source.addEventListener("open", () => {
    live.mode = "live";
    stopFallback();
    // Whatever happened while the stream was down (or before it opened) is fetched once.
    tick();
  });
  source.addEventListener("event", (m) => {
    live.lastEventId = m.lastEventId || live.lastEventId;
    let ev;
    try { ev = JSON.parse(m.data); } catch (_) { return; }
    onStreamEvent(ev);
  });
  source.addEventListener("progress", (m) => {
    let p;
    try { p = JSON.parse(m.data); } catch (_) { return; }
    onProgress(p);
  });
  source.addEventListener("error", () => {
    if (live.source !== source) return;
    live.mode = "fallback";
    setConn(document.body.dataset.status !== "error");
    startFallback();
    if (source.readyState === EventSource.CLOSED) {
      // The browser gave up (the server answered with an error): try again later.
      source.close();
      live.source = null;
      setTimeout(connectStream, 10000);
    }
  });
}

// ---------- navigation ----------

function rerenderFromCache() {
  renderJobs();
  for (const b of $("state-counts").querySelectorAll("button.count")) {
    b.classList.toggle("active", b.dataset.state === ui.stateFilter);
  }
  if (ui.groups.length) renderGroups(ui.groups);
}

/** Brings the page to the state the URL describes (reload, back, forward, a pasted link). */
function applyUrl() {
  const before = { selected: ui.selected, study: ui.study, metric: ui.metric, xAxis: ui.xAxis, smooth: ui.smooth };
  Object.assign(ui, stateFromHash());
  syncControls();
  rerenderFromCache();
  if (ui.study !== before.study) {
    if (ui.study) openStudy(ui.study);
    else closeStudy();
  } else if (ui.study && ui.studyData) {
    if (ui.metric !== before.metric) changeMetric();
    else if (ui.xAxis !== before.xAxis || ui.smooth !== before.smooth) renderStudyChart();
  }
  if (ui.selected && ui.selected !== before.selected) openJob(ui.selected, false);
  else if (!ui.selected && before.selected) closeJob(false);
}

function goToStudy(name) {
  ui.study = name;
  ui.metric = "";
  writeHash(true);
  openStudy(name);
}

async function changeMetric() {
  const metric = effectiveMetric();
  renderStudy();
  await Promise.all(studyRuns().map((r) => {
    const run = ui.runs.get(r.run_id);
    return run && run.series.has(metric) ? null : fetchSeries(r.run_id, metric).catch(() => null);
  }));
  renderStudy();
}

function init() {
  Object.assign(ui, stateFromHash());
  syncControls();
  $("filter-state").addEventListener("change", (e) => { ui.stateFilter = e.target.value; writeHash(); rerenderFromCache(); });
  $("filter-group").addEventListener("change", (e) => { ui.groupFilter = e.target.value; writeHash(); rerenderFromCache(); });
  $("filter-text").addEventListener("input", (e) => { ui.text = e.target.value.trim(); writeHash(); rerenderFromCache(); });

  $("state-counts").addEventListener("click", (e) => {
    const btn = e.target.closest("button[data-state]");
    if (!btn) return;
    ui.stateFilter = ui.stateFilter === btn.dataset.state ? "" : btn.dataset.state;
    $("filter-state").value = ui.stateFilter;
    writeHash();
    rerenderFromCache();
  });

  // Groups: a row (or its name) opens the group's study; the button filters the jobs table.
  const groupsBody = $("groups-table").tBodies[0];
  groupsBody.addEventListener("click", (e) => {
    const filter = e.target.closest("button[data-filter-group]");
    if (filter) {
      ui.groupFilter = ui.groupFilter === filter.dataset.filterGroup ? "" : filter.dataset.filterGroup;
      syncGroupSelect();
      writeHash();
      rerenderFromCache();
      if (ui.groupFilter) $("jobs-title").scrollIntoView({ block: "start" });
      return;
    }
    const row = e.target.closest("tr[data-group]");
    if (row) { e.preventDefault(); goToStudy(row.dataset.group); }
  });
  groupsBody.addEventListener("keydown", (e) => {
    const row = e.target.closest("tr[data-group]");
    if (row && e.target === row && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); goToStudy(row.dataset.group); }
  });
  $("plan-groups").tBodies[0].addEventListener("click", (e) => {
    const row = e.target.closest("tr[data-group]");
    if (row) goToStudy(row.dataset.group);
  });
  $("plan-groups").tBodies[0].addEventListener("keydown", (e) => {
    const row = e.target.closest("tr[data-group]");
    if (row && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); goToStudy(row.dataset.group); }
  });

  $("study-back").addEventListener("click", (e) => {
    e.preventDefault();
    ui.study = null;
    writeHash(true);
    closeStudy();
  });
  $("study-metric").addEventListener("change", (e) => { ui.metric = e.target.value; writeHash(); changeMetric(); });
  $("study-x").addEventListener("change", (e) => { ui.xAxis = e.target.value === "hours" ? "hours" : "step"; writeHash(); renderStudyChart(); });
  $("study-smooth").addEventListener("input", (e) => {
    ui.smooth = Math.max(0, Math.min(0.99, Number(e.target.value) || 0));
    $("study-smooth-value").textContent = ui.smooth.toFixed(2);
    writeHash();
    renderStudyChart();
  });

  $("plan-apply").addEventListener("click", () => {
    $("plan-apply").hidden = true;
    $("plan-apply-confirm").hidden = false;
    $("plan-apply-yes").focus();
  });
  $("plan-apply-yes").addEventListener("click", applyPlan);
  $("plan-apply-no").addEventListener("click", () => {
    $("plan-apply-confirm").hidden = true;
    $("plan-apply").hidden = false;
  });

  $("detail-cancel").addEventListener("click", () => {
    $("detail-cancel").hidden = true;
    $("detail-cancel-confirm").hidden = false;
    $("detail-cancel-yes").focus();
  });
  $("detail-cancel-yes").addEventListener("click", () => jobAction("cancel"));
  $("detail-cancel-no").addEventListener("click", () => {
    $("detail-cancel-confirm").hidden = true;
    $("detail-cancel").hidden = false;
  });
  $("detail-requeue").addEventListener("click", () => jobAction("requeue"));

  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token-input").value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    $("token-input").value = "";
    $("token-form").hidden = true;
  });
  $("token-cancel").addEventListener("click", () => { $("token-form").hidden = true; });

  // Job rows, running rows, legend entries and "shares run of" links open the detail panel.
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
  $("detail-close").addEventListener("click", () => closeJob());
  for (const id of ["log-host", "log-attempt", "log-follow"]) $(id).addEventListener("change", () => pollLog());
  let grepTimer = null;
  $("log-grep").addEventListener("input", () => { clearTimeout(grepTimer); grepTimer = setTimeout(pollLog, 300); });
  $("detail-backdrop").addEventListener("click", () => closeJob());
  window.addEventListener("popstate", applyUrl);
  window.addEventListener("hashchange", applyUrl);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && live.mode !== "live") tick();
  });

  showView();
  if (ui.study) openStudy(ui.study);
  if (ui.selected) openJob(ui.selected, false);
  refreshPlan();
  setInterval(refreshPlan, PLAN_REFRESH_MS);
  if (POLL_MS) {
    pollLoop();
  } else {
    connectStream();
    // A stream that does not open soon: show the page anyway, and keep it current slowly.
    setTimeout(() => { if (live.mode !== "live") { tick(); startFallback(); } }, STREAM_OPEN_GRACE_MS);
  }
}

init();
