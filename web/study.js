// The study view: a group's runs side by side (GET /api/v1/groups/{name}/study), one metric
// against step or pod-hours with smoothing and interruption marks, each run's mark at each
// rung it reached (promoted, waiting or pruned), the rungs' table, and its results table.

import { HttpError, getJSON } from "./api.js";
import { drawStudyChart } from "./charts.js";
import { setConn } from "./conn.js";
import { $, badge, el } from "./dom.js";
import { setDownload } from "./download.js";
import { fmtInt, fmtNum, stepOfResume } from "./format.js";
import { ui, writeHash } from "./state.js";

const ENDED_BADLY = ["preempted", "lost", "failed", "hung"];
const PALETTE = ["#2f6fde", "#e0702a", "#23955a", "#c2399c", "#9a7b12", "#d33d3d", "#1b9aaa", "#6f52c9", "#5f7a1f", "#7d5a50"];

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

/** The metrics the group watches, its rungs' metric first. */
function watchedMetrics() {
  const data = ui.studyData;
  const watch = (data && data.metrics_to_watch) || [];
  const rungMetric = data && data.rungs ? data.rungs.metric : null;
  return rungMetric ? [rungMetric, ...watch.filter((m) => m !== rungMetric)] : watch;
}

export function studyConcerns(jobId) {
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
  const watch = watchedMetrics();
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
export function scheduleSeries(runId) {
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

export async function loadStudy() {
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
export function scheduleStudy() {
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
  // The table's rows as GET /groups/{name}/results.csv gives them, for a notebook.
  setDownload($("study-csv"), `/groups/${encodeURIComponent(data.group)}/results.csv`, `results-${data.group}.csv`);

  // the metric choice: the ones to watch first, then every other recorded one
  const recorded = recordedMetrics();
  const watch = watchedMetrics();
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
  renderRungTable();
  renderStudyTable();
}

// What a run's standing at a rung reads as: a paused run waits for its siblings' values.
const VERDICT_TEXT = { promoted: "promoted", paused: "waiting", pruned: "pruned", no_value: "not judged" };
const VERDICT_PILL = { promoted: "ok", paused: "warn", pruned: "bad" };

function pct(share) {
  return `${Number((share * 100).toFixed(1))}%`;
}

function verdictOf(r) {
  return r.verdict || "judging";
}

/** "rung 1 (25%) at step 250: eval/exact_accuracy = 0.3, rank 4 of 5: pruned". */
function rungText(r, rungs) {
  const at = rungs.at[r.rung - 1];
  const where = `rung ${r.rung}${at === undefined ? "" : ` (${pct(at)})`}${r.step === null || r.step === undefined ? "" : ` at step ${fmtInt(r.step)}`}`;
  const value = r.value === null || r.value === undefined ? `no ${rungs.metric}` : `${rungs.metric} = ${fmtNum(r.value)}`;
  const rank = r.rank && r.of ? `, rank ${r.rank} of ${r.of}` : "";
  const by = r.decided_by && r.decided_by !== "podq" ? ` by ${r.decided_by}` : "";
  const verdict = r.verdict === "paused" ? "waiting for its siblings (paused, holding no pod)"
    : r.verdict === "no_value" ? "not judged: its metric never reported there" : `${verdictOf(r)}${by}`;
  return `${where}: ${value}${rank}: ${verdict}`;
}

/** The rungs' table: one row per experiment, a column per rung with value, rank and decision. */
function renderRungTable() {
  const data = ui.studyData;
  const rungs = data.rungs;
  const card = $("study-rungs");
  const table = $("study-rungs-table");
  card.hidden = !rungs;
  if (!rungs) {
    table.tHead.replaceChildren();
    table.tBodies[0].replaceChildren();
    $("study-rungs-desc").textContent = "";
    return;
  }
  $("study-rungs-desc").textContent = rungs.description +
    (rungs.keep_auto ? ` (keep: auto; the plan keeps ${pct(rungs.keep)})` : "") +
    (rungs.lower_is_better ? " · lower is better" : " · higher is better");
  table.tHead.replaceChildren(el("tr", null,
    el("th", null, "Experiment"), el("th", null, "State"),
    ...rungs.at.map((at, k) => el("th", { "data-rung": k + 1, title: `rung ${k + 1}: judged at ${pct(at)} of each run's steps` }, `Rung ${k + 1} · ${pct(at)}`))));
  table.tBodies[0].replaceChildren(...data.rows.map((row) => el("tr", {
    "data-experiment": row.experiment, "data-job-id": row.job_id || "", class: row.baseline ? "baseline" : null,
  },
  el("td", { class: "exp" }, row.job_id ? el("a", { href: "#", "data-open-job": row.job_id }, row.experiment) : row.experiment,
    row.baseline ? el("span", { class: "pill" }, "baseline") : null),
  el("td", null, badge(row.state)),
  ...rungs.at.map((_, k) => {
    const r = (row.rungs || []).find((x) => x.rung === k + 1);
    if (!r) return el("td", { class: "rung-cell muted", "data-rung": k + 1 }, "–");
    const verdict = verdictOf(r);
    return el("td", { class: "rung-cell", "data-rung": k + 1, "data-verdict": verdict, title: rungText(r, rungs) },
      el("span", { class: "mono" }, r.value === null || r.value === undefined ? "no value" : fmtNum(r.value)),
      r.rank && r.of ? el("span", { class: "muted mono rung-rank" }, ` ${r.rank}/${r.of} `) : " ",
      el("span", { class: `pill ${VERDICT_PILL[verdict] || ""}`.trim() }, VERDICT_TEXT[verdict] || verdict));
  }))));
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

/** The study's chart of the chosen metric, one curve per run, and its legend. */
export function renderStudyChart() {
  const data = ui.studyData;
  if (!data) return;
  const metric = effectiveMetric();
  const hours = ui.xAxis === "hours";
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
    // Each rung it reached, on its curve at the step it was judged there.
    const rungs = data.rungs;
    for (const r of (rungs && row.rungs) || []) {
      if (r.step === null || r.step === undefined || !pts.length) continue;
      const x = hours ? hoursAt(spans, r.step) : r.step;
      if (x === null) continue;
      marks.push({ kind: verdictOf(r), role: "rung", rung: r.rung, step: r.step, x, y: pointNear(pts, x, false).y,
        title: `${row.experiment}: ${rungText(r, rungs)}` });
    }
    curves.push({ row, color, pts, marks });
  });
  drawStudyChart($("study-chart"), curves, { metric, xAxis: ui.xAxis, smooth: ui.smooth, runs: rows.length });
  renderLegend(curves);
}

function paramsText(row) {
  const entries = Object.entries(row.params || {});
  if (row.baseline) return "baseline";
  if (!entries.length) return "same config as the baseline";
  return entries.map(([k, v]) => `${k.split(".").pop()}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
}

/** "pruned at rung 1": the run's newest rung decision, for the legend. */
function lastRung(row) {
  const decided = (row.rungs || []).filter((r) => r.verdict);
  const r = decided[decided.length - 1];
  if (!r) return null;
  const verdict = verdictOf(r);
  return el("span", { class: `rung-verdict rung-${verdict}`, "data-rung-verdict": verdict, title: ui.studyData.rungs ? rungText(r, ui.studyData.rungs) : null },
    `${VERDICT_TEXT[verdict] || verdict} at rung ${r.rung}`);
}

function renderLegend(curves) {
  $("study-legend").replaceChildren(...curves.map((c) => {
    const stops = c.marks.filter((m) => m.role === "stop").length;
    return el("li", { "data-experiment": c.row.experiment, style: `--curve:${c.color}` },
      el("span", { class: "swatch", "aria-hidden": "true" }),
      el("a", { href: "#", "data-open-job": c.row.job_id || c.row.run_id }, c.row.experiment),
      el("span", { class: "muted" }, ` ${paramsText(c.row)} `),
      badge(c.row.state),
      lastRung(c.row),
      stops ? el("span", { class: "warn-text small" }, ` ${stops} interrupted`) : null);
  }));
}

function paramValue(v) {
  if (v === null || v === undefined) return "";
  return typeof v === "string" ? v : JSON.stringify(v);
}

function renderStudyTable() {
  const data = ui.studyData;
  const table = $("study-table");
  const keys = [...new Set(data.rows.flatMap((r) => Object.keys(r.params || {})))].sort();
  const watch = watchedMetrics();
  const metrics = [...watch.filter((m) => m.startsWith("eval/")), ...watch.filter((m) => !m.startsWith("eval/"))];
  table.tHead.replaceChildren(el("tr", null,
    el("th", null, "Experiment"), el("th", null, "State"),
    ...keys.map((k) => el("th", { "data-param": k, title: k }, k)),
    ...metrics.flatMap((m) => [el("th", { class: "num", "data-metric": m, title: `${m}: the newest point` }, `${m} final`),
      el("th", { class: "num", "data-metric": m, title: `${m}: the best point (lowest for a loss, error or perplexity)` }, `${m} best`)]),
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

export function showView() {
  const study = Boolean(ui.study);
  $("overview-view").hidden = study;
  $("study-view").hidden = !study;
  document.body.dataset.view = study ? "study" : "overview";
  document.title = study ? `${ui.study} · podq` : "podq";
}

export function openStudy(name) {
  if (!ui.studyData || ui.studyData.group !== name) {
    ui.studyData = null;
    ui.runs = new Map();
    $("study-chart").replaceChildren();
    $("study-legend").replaceChildren();
    $("study-table").tHead.replaceChildren();
    $("study-table").tBodies[0].replaceChildren();
    $("study-rungs").hidden = true;
    $("study-rungs-table").tHead.replaceChildren();
    $("study-rungs-table").tBodies[0].replaceChildren();
    $("study-title").textContent = name;
    $("study-sub").textContent = "";
    $("study-metric").dataset.options = "";
  }
  ui.study = name;
  showView();
  window.scrollTo(0, 0);
  loadStudy().catch((e) => setConn(false, e));
}

export function closeStudy() {
  ui.study = null;
  ui.studyData = null;
  ui.runs = new Map();
  showView();
}

export function goToStudy(name) {
  ui.study = name;
  ui.metric = "";
  writeHash(true);
  openStudy(name);
}

export async function changeMetric() {
  const metric = effectiveMetric();
  renderStudy();
  await Promise.all(studyRuns().map((r) => {
    const run = ui.runs.get(r.run_id);
    return run && run.series.has(metric) ? null : fetchSeries(r.run_id, metric).catch(() => null);
  }));
  renderStudy();
}
