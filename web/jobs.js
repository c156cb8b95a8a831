// The overview's lists: the groups table and the jobs table with its filters. Rows are
// patched in place when one job changes, so a click or the focus on them survives.

import { $, badge, el, progressBar } from "./dom.js";
import { fmtNum, fmtTime, stepText } from "./format.js";
import { hashOf, syncGroupSelect, ui } from "./state.js";
import { syncSubmitForm } from "./submit.js";

/** Job states in the order the page lists them. */
export const STATES = ["running", "leased", "queued", "held", "succeeded", "stopped", "failed", "cancelled"];

function experimentOf(id) {
  const job = ui.jobsById.get(id);
  return job ? job.experiment : id ? String(id).slice(0, 8) : "";
}

/** A link that opens the job's panel, named by its experiment. */
export function jobLink(id) {
  const a = el("a", { href: "#", class: "joblink", "data-open-job": id }, experimentOf(id));
  return a;
}

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

/** The groups table, and the group filter's choices when the groups changed. */
export function renderGroups(groups) {
  ui.groups = groups;
  syncSubmitForm();
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

/** The jobs table: the loaded jobs the filters let through. */
export function renderJobs() {
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
export function updateJobRow(job) {
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

/** Takes a GET /jobs answer as the loaded list. */
export function setJobs(list) {
  ui.jobs = list.jobs || [];
  ui.listTotal = list.total ?? ui.jobs.length;
  ui.jobsById = new Map(ui.jobs.map((j) => [j.id, j]));
}

/** Puts one job (from its detail) into the list, in submission order. */
export function upsertJob(detail) {
  const fields = ["id", "experiment", "group", "state", "priority", "submitted_at", "updated_at",
    "checkpoint_dir", "resume_from", "last_step", "total_steps", "attempt_count", "failures",
    "max_failures", "preemptions", "same_as", "not_before", "message", "config_sha256",
    "submitted_by", "priority_class", "stopped_by", "actions", "refused_actions"];
  const job = {};
  for (const f of fields) if (f in detail) job[f] = detail[f];
  // A whole job from the server leaves out what it does not have: none left from before.
  if ("actions" in detail) {
    if (!("refused_actions" in detail)) job.refused_actions = [];
    if (!("stopped_by" in detail)) job.stopped_by = null;
  }
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

/** Marks the open job's row. */
export function markSelectedRows() {
  for (const row of $("jobs-table").tBodies[0].rows) {
    row.classList.toggle("selected", row.dataset.jobId === ui.selected);
  }
}

/** Shows the loaded data again after a filter changed, without a request. */
export function rerenderFromCache() {
  renderJobs();
  for (const b of $("state-counts").querySelectorAll("button.count")) {
    b.classList.toggle("active", b.dataset.state === ui.stateFilter);
  }
  if (ui.groups.length) renderGroups(ui.groups);
}

