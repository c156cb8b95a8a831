// The plan card: today's order against the recommended one before the grant's deadline
// (GET /api/v1/plan), its timeline, where the pod time went, and applying the recommended
// order (admins only).

import { change, getJSON } from "./api.js";
import { drawTimeline } from "./charts.js";
import { $, el } from "./dom.js";
import { fmtDate, fmtDuration, fmtNum } from "./format.js";
import { podTimeBar, podTimeLegend, recoveryLines } from "./podtime.js";
import { ui } from "./state.js";
import { whyNotManage, youAre } from "./who.js";

// The plan follows every change of state through the stream; this only catches the clock.
export const PLAN_REFRESH_MS = 300000;
const PLAN_MIN_GAP_MS = 10000;

function fitOf(fit, total) {
  return fit === null || fit === undefined ? `– of ${total}` : `${fit} of ${total}`;
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
      el("span", { class: "muted" }, ` · ${whyNotManage() ? "an admin sets" : "set"} one with PUT /api/v1/grant; until then nothing claims to fit`));
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
      (p.spares ? `, ${p.spares} warm spare${p.spares === 1 ? "" : "s"}` +
        (p.spare_idle_hours !== null && p.spare_idle_hours !== undefined ? ` (${fmtNum(p.spare_idle_hours)} idle pod-hours at most)` : "") : "") +
      (p.capacity_hours !== null && p.capacity_hours !== undefined ? `, ${fmtNum(p.capacity_hours)} of capacity` : "")).join("; ") + ".");
  }
  $("plan-notes").textContent = notes.join(" ");
  const advised = (plan.scenarios || []).find((s) => s.name === "advised_intervals");
  $("plan-advice").textContent = advised
    ? `At the advised checkpoint intervals: ${fmtNum(plan.pod_hours_saved_by_advice)} pod-hours saved, ` +
      `${fitOf(advised.runs_fit, runs)} runs and ${fitOf(advised.groups_fit, groups)} groups fit.`
    : "";
  refreshPodTime();
  syncPlanApply();

  drawTimeline($("plan-timeline"), plan);

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

/**
 * The apply button: disabled, saying why, when you are not an admin or when today's order is
 * the recommended one already.
 */
export function syncPlanApply() {
  const button = $("plan-apply");
  const why = whyNotManage();
  const plan = ui.plan;
  const same = Boolean(plan) && JSON.stringify(plan.current.runs.map((r) => r.experiment)) ===
    JSON.stringify(plan.recommended.runs.map((r) => r.experiment));
  button.disabled = Boolean(why) || same;
  button.title = why ? `${why}: applying the plan reprioritises everyone's jobs; ${youAre()}`
    : same ? "today's order is the recommended one" : "";
  if (why) {
    $("plan-apply-confirm").hidden = true;
    button.hidden = false;
  }
  const note = $("plan-apply-why");
  note.textContent = why || "";
  note.hidden = !why;
}

/** The grant's and each pod's split, and the recoveries' medians, under the plan. */
async function refreshPodTime() {
  try {
    const report = await getJSON("/pod-time");
    $("plan-pod-time").replaceChildren(podTimeBar("grant", report.grant),
      ...Object.entries(report.pods || {}).map(([name, time]) => podTimeBar(`pod ${name}`, time)),
      podTimeLegend());
  } catch (e) {
    $("plan-pod-time").replaceChildren(el("p", { class: "muted" }, `Could not load the pod time: ${e.message}`));
  }
  try {
    const recoveries = await getJSON("/recoveries?limit=1");
    $("plan-recovery").replaceChildren(...recoveryLines(recoveries.summary));
  } catch (e) {
    $("plan-recovery").replaceChildren(el("p", { class: "muted" }, `Could not load the recoveries: ${e.message}`));
  }
}

let planInFlight = false;
let planLoadedAt = 0;
let planTimer = null;

export async function refreshPlan() {
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
export function schedulePlan() {
  if (planTimer) return;
  const wait = Math.max(500, planLoadedAt + PLAN_MIN_GAP_MS - Date.now());
  planTimer = setTimeout(() => { planTimer = null; refreshPlan(); }, wait);
}

/** Applies the recommended order; true when the server did. */
export async function applyPlan() {
  $("plan-apply-confirm").hidden = true;
  $("plan-apply").hidden = false;
  const status = $("plan-apply-status");
  status.textContent = "applying…";
  try {
    const applied = await change("POST", "/plan/apply");
    renderPlan(applied.plan);
    planLoadedAt = Date.now();
    const n = applied.submitted.length;
    status.textContent = `Applied: ${applied.reprioritised} job${applied.reprioritised === 1 ? "" : "s"} reprioritised` +
      (n ? `, ${n} experiment${n === 1 ? "" : "s"} submitted.` : ".");
    status.dataset.result = "applied";
    return true;
  } catch (e) {
    status.textContent = `Not applied: ${e.message}`;
    status.dataset.result = "error";
    return false;
  }
}
