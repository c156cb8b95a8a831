// podq dashboard: the entry point, which wires the modules beside it together. Native ES
// modules, served as they are from the binary (no build step):
//
//   api.js     talking to the server: JSON calls, their errors, your token
//   who.js     who you are (GET /whoami), shown in the top bar, and what your role may do
//   sse.js     the event stream, read through fetch so it carries your token
//   state.js   the page's state (`ui`) and its form in the URL's hash
//   conn.js    how the page keeps current, and the indicator that says so
//   live.js    keeping the page current: the event stream, the fallback and `?poll=` polling
//   status.js  the summary: job counts, queue, pods, what is running
//   capacity.js the capacity card: pools' slices and zones
//   jobs.js    the groups and jobs tables
//   plan.js    the plan card
//   study.js   the study view of a group's runs
//   charts.js  the SVG charts (plan timeline, study chart, the panel's line charts)
//   panel.js   a job's panel
//   logs.js    the panel's log, followed live through /jobs/{id}/logs/follow
//   podtime.js pod time bars, goodput and checkpoint advice
//   dom.js, format.js  building elements; how values read
//
// The page's state (view, group, job, filters, metric, x axis, smoothing) lives in the URL's
// hash, so reload, back and a shared link all show the same thing. Rendering uses DOM
// methods only: every piece of data reaches the page through textContent or setAttribute,
// never innerHTML.
//
// A server with tokens shows who you are in the top bar; the actions your role cannot take
// are disabled, each saying why. Your token is asked for once when reads need one, and kept
// for the tab (sessionStorage).

import { askForToken, forgetToken, saveToken, token } from "./api.js";
import { startCapacity } from "./capacity.js";
import { conn } from "./conn.js";
import { $ } from "./dom.js";
import { rerenderFromCache } from "./jobs.js";
import { fullRefresh, jobChanged, restartLive, startLive, tick } from "./live.js";
import { followLog } from "./logs.js";
import { closeJob, jobAction, openJob, syncDetailActions } from "./panel.js";
import { applyPlan, syncPlanApply } from "./plan.js";
import { stateFromHash, syncControls, syncGroupSelect, ui, writeHash } from "./state.js";
import { changeMetric, closeStudy, goToStudy, openStudy, renderStudyChart, showView } from "./study.js";
import { formChanged, previewSubmit, sendSubmit, syncSubmitForm } from "./submit.js";
import { loadWho } from "./who.js";

const WHO_RETRY_MS = 5000;

/** Who you are, asked again until the server answers; then every action says if it is yours. */
async function refreshWho() {
  try {
    if (!(await loadWho())) return;
  } catch (_) {
    setTimeout(refreshWho, WHO_RETRY_MS); // the server is not reachable yet
    return;
  }
  syncPlanApply();
  syncDetailActions();
  syncSubmitForm();
}

/** A token given, changed or forgotten: who you are, and everything you may read, again. */
async function tokenChanged() {
  await refreshWho();
  restartLive();
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
  $("plan-apply-yes").addEventListener("click", async () => {
    if (await applyPlan()) fullRefresh().catch(() => {});
  });
  $("plan-apply-no").addEventListener("click", () => {
    $("plan-apply-confirm").hidden = true;
    $("plan-apply").hidden = false;
  });

  $("detail-cancel").addEventListener("click", () => {
    $("detail-cancel").hidden = true;
    $("detail-cancel-confirm").hidden = false;
    $("detail-cancel-yes").focus();
  });
  $("detail-cancel-yes").addEventListener("click", () => jobAction("cancel", jobChanged));
  $("detail-cancel-no").addEventListener("click", () => {
    $("detail-cancel-confirm").hidden = true;
    $("detail-cancel").hidden = false;
  });
  $("detail-requeue").addEventListener("click", () => jobAction("requeue", jobChanged));
  $("detail-suspend").addEventListener("click", () => jobAction("suspend", jobChanged));
  for (const edit of ["input", "change"]) $("submit-form").addEventListener(edit, formChanged);
  $("submit-form").addEventListener("submit", (e) => {
    e.preventDefault();
    previewSubmit();
  });
  $("submit-send").addEventListener("click", () => sendSubmit(() => fullRefresh()));
  $("detail-resume").addEventListener("click", () => jobAction("resume", jobChanged));
  for (const edit of ["input", "change"]) {
    $("detail-change").addEventListener(edit, () => { $("detail-change").dataset.edited = "true"; });
  }
  $("detail-change").addEventListener("submit", (e) => {
    e.preventDefault();
    jobAction("change", jobChanged);
  });

  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const given = $("token-input").value.trim();
    $("token-input").value = "";
    $("token-form").hidden = true;
    if (given) saveToken(given);
  });
  $("token-cancel").addEventListener("click", () => { $("token-form").hidden = true; });
  $("token-forget").addEventListener("click", () => {
    $("token-input").value = "";
    $("token-form").hidden = true;
    forgetToken();
  });
  $("who-change").addEventListener("click", () => {
    askForToken(token() ? "Paste another token, or forget this one." : "Paste your token to act as yourself.", true);
  });
  window.addEventListener("podq-token", () => { tokenChanged(); });

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
  for (const id of ["log-host", "log-attempt", "log-follow"]) $(id).addEventListener("change", () => followLog());
  let grepTimer = null;
  $("log-grep").addEventListener("input", () => { clearTimeout(grepTimer); grepTimer = setTimeout(followLog, 300); });
  $("detail-backdrop").addEventListener("click", () => closeJob());
  window.addEventListener("popstate", applyUrl);
  window.addEventListener("hashchange", applyUrl);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && conn.mode !== "live") tick();
  });

  showView();
  if (ui.study) openStudy(ui.study);
  if (ui.selected) openJob(ui.selected, false);
  refreshWho();
  startLive();
  startCapacity();
}

init();
