// The job panel: one job's facts (who submitted it, its class, who last acted on it, its rung
// decisions), pod time, charts, attempts, checkpoints and timeline, with Cancel, Requeue,
// Suspend, Resume and a change of class or priority for whoever may; its log is logs.js's.

import { HttpError, change, getJSON } from "./api.js";
import { lineChart } from "./charts.js";
import { setConn } from "./conn.js";
import { $, badge, el, timeCell } from "./dom.js";
import { setDownload } from "./download.js";
import { fmtAgo, fmtInt, fmtNum, fmtTime, stepOfResume, stepText } from "./format.js";
import { jobLink, markSelectedRows, updateJobRow, upsertJob } from "./jobs.js";
import { closeLog, keepLogCurrent, setLogChoices, stopLog } from "./logs.js";
import { adviceText, goodputText, podTimeBar, podTimeLegend } from "./podtime.js";
import { ui, writeHash } from "./state.js";
import { me, youAre } from "./who.js";

const METRICS = ["train/lm_loss", "train/exact_accuracy", "eval/exact_accuracy"];

// What each action's status line says while it runs, once done, and when refused.
const SAYS = {
  cancel: ["cancelling…", (job) => (job && job.state === "cancelled" ? "Cancelled." : "Cancel requested: every host is being stopped."), "Not cancelled"],
  requeue: ["requeueing…", () => "Requeued.", "Not requeued"],
  suspend: ["suspending…", (job) => (job && job.state === "held" ? "Suspended: held until resumed." : "Suspend requested: the trainer saves, then the job is held."), "Not suspended"],
  resume: ["resuming…", () => "Resumed: back in the queue.", "Not resumed"],
  change: ["changing…", (job) => (job ? `Now class ${job.priority_class}, priority ${job.priority}.` : "Changed."), "Not changed"],
};

// What a person did to a job, as the panel's "who did what" line says it; the newest of these
// events is the line. Worker and podq events (leased, preempted, ...) are the timeline's.
const ACTS = {
  submitted: () => "submitted",
  cancelled: () => "cancelled",
  requeued: () => "requeued",
  suspended: () => "suspended",
  resumed: () => "resumed",
  priority: (e) => e.message, // "priority 0 -> 5"
  class: (e) => e.message, // "class normal -> urgent"
};

/** "cancelled by alice, 2h 5m ago": the newest thing a person (or a schedule) did to the job. */
function lastAct(events) {
  let last = null;
  for (const e of events) {
    if (!ACTS[e.kind] || !e.by) continue;
    if (!last || e.at > last.at || (e.at === last.at && e.id > last.id)) last = e;
  }
  return last ? { kind: last.kind, by: last.by, at: last.at, text: `${ACTS[last.kind](last)} by ${last.by}, ${fmtAgo(last.at)}` } : null;
}

function renderLastAct(events) {
  const act = lastAct(events);
  const line = $("detail-by");
  line.textContent = act ? act.text : "";
  line.title = act ? act.at : "";
  line.dataset.kind = act ? act.kind : "";
  line.dataset.by = act ? act.by : "";
}

/** "`eval/loss not improved in 3 evaluations` at step 4,070 (eval/loss = 0.61)". */
function stoppedBy(fired) {
  if (!fired) return null;
  const value = typeof fired.value === "number" ? fmtNum(fired.value) : fired.value;
  return `\`${fired.rule}\` at step ${fmtInt(fired.step)} (${fired.metric} = ${value})`;
}

// A run's standing at each rung its group's rungs judged it at (GET /jobs/{id} `rungs`).
const RUNG_SAYS = {
  promoted: "promoted",
  paused: "paused: waits for its siblings, holding no pod",
  pruned: "pruned",
  no_value: "not judged: its metric never reported there",
};

/** "rung 1: pruned, rank 4 of 5 (0.3)", one line per rung. */
function rungFacts(rungs) {
  if (!Array.isArray(rungs) || !rungs.length) return [];
  return [el("dt", null, rungs.length > 1 ? "Rungs" : "Rung"), el("dd", { class: "rungs" },
    ...rungs.map((r) => {
      const rank = r.rank && r.of ? `, rank ${r.rank} of ${r.of}` : "";
      const value = typeof r.value === "number" ? ` (${fmtNum(r.value)})` : "";
      const by = r.decided_by && r.decided_by !== "podq" ? ` by ${r.decided_by}` : "";
      return el("div", { class: `rung-verdict rung-${r.verdict}`, "data-rung": r.rung, "data-verdict": r.verdict, title: r.decided_at || null },
        `rung ${r.rung}: ${RUNG_SAYS[r.verdict] || r.verdict}${by}${rank}${value}`);
    }))];
}

function fact(label, value, cls) {
  if (value === null || value === undefined || value === "") return [];
  return [el("dt", null, label), el("dd", { class: cls || null }, value)];
}

// The trainer's links (its W&B run, say): each a link that opens apart, its text set as
// text. The server takes only http(s) URLs; one that is not anyway stays plain text.
function linkFacts(links) {
  return (Array.isArray(links) ? links : []).flatMap((link) => {
    const url = String(link.url || "");
    const safe = /^https?:\/\//i.test(url);
    return [el("dt", null, link.name === "wandb" ? "W&B run" : `Link: ${link.name}`),
      el("dd", { class: "mono wrap", "data-link": link.name },
        safe ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, url) : url)];
  });
}

function renderDetail(detail, metrics, events) {
  const panel = $("job-detail");
  panel.setAttribute("data-job-id", detail.id);
  panel.setAttribute("data-state", detail.state);
  // Whether the run may still print: the server's word (`settled`), not a list of states here.
  panel.setAttribute("data-settled", String(detail.settled));
  $("detail-experiment").textContent = detail.experiment;
  $("detail-state").replaceChildren(badge(detail.state));
  $("detail-sub").textContent = `${detail.group} · ${detail.id}`;
  $("detail-error").hidden = true;
  setDetailActions(detail);

  const attempts = Array.isArray(detail.attempts) ? detail.attempts : [];
  const checkpoints = Array.isArray(detail.checkpoints) ? detail.checkpoints : [];
  const listed = ui.jobsById.get(detail.id);
  const attemptCount = listed ? listed.attempt_count : attempts.length;
  $("detail-facts").replaceChildren(
    ...fact("Step", stepText(detail.last_step, detail.total_steps), "mono"),
    ...fact("Submitted by", detail.submitted_by || "nobody recorded (before podq knew people)"),
    ...fact("Priority", String(detail.priority)),
    ...fact("Class", detail.priority_class),
    ...fact("Slice types", Array.isArray(detail.accelerators) && detail.accelerators.length
      ? detail.accelerators.join(" › ") : null, "mono"),
    ...fact("Attempts", String(attemptCount)),
    ...fact("Failures", `${detail.failures} of ${detail.max_failures}`),
    ...fact("Preemptions", String(detail.preemptions)),
    ...fact("Submitted", detail.submitted_at ? `${fmtTime(detail.submitted_at)} (${fmtAgo(detail.submitted_at)})` : null),
    ...fact("Updated", detail.updated_at ? fmtAgo(detail.updated_at) : null),
    ...fact("Goodput", goodputText(detail.goodput)),
    ...fact("Backoff until", detail.not_before ? fmtTime(detail.not_before) : null),
    ...(detail.same_as ? [el("dt", null, "Shares run of"), el("dd", null, jobLink(detail.same_as))] : []),
    ...fact("Message", detail.message),
    ...fact("Stopped by", stoppedBy(detail.stopped_by), "bad-text"),
    ...rungFacts(detail.rungs),
    ...linkFacts(detail.links),
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

  // Every point of the run's series, not the charts' downsampled ones.
  setDownload($("detail-metrics-csv"), `/jobs/${encodeURIComponent(detail.id)}/metrics.csv`, `${detail.experiment}-metrics.csv`);

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
    // Where it ran: a run may move between the slice types of its job's list.
    el("td", { class: "mono", "data-accelerator": a.accelerator || "" }, a.accelerator || "–"),
    el("td", null, a.outcome ? badge(a.outcome, "outcome") : el("span", { class: "muted" }, a.ended_at ? "—" : "in progress")),
    el("td", { class: "mono" }, `${a.start_step ?? "–"} → ${a.end_step ?? "–"}`),
    // This attempt's own resume point, never the job's next one.
    el("td", { class: "mono resume", "data-resume-from": a.resume_from || "", title: a.resume_from || null },
      a.resume_from ? `step ${stepOfResume(a.resume_from) ?? a.resume_from}` : el("span", { class: "muted" }, "start")),
    el("td", null, timeCell(a.started_at)),
    el("td", null, a.ended_at ? timeCell(a.ended_at) : "–"),
    el("td", { class: "msg", title: a.message || null }, a.message || ""),
  )) : [el("tr", null, el("td", { colspan: 9, class: "muted" }, "No attempts yet."))]));

  const ctb = $("detail-checkpoints").tBodies[0];
  const sortedCk = [...checkpoints].sort((a, b) => b.step - a.step);
  ctb.replaceChildren(...(sortedCk.length ? sortedCk.map((c) => el("tr", { "data-step": c.step },
    el("td", { class: "num mono" }, fmtInt(c.step)),
    el("td", null, el("span", { class: `pill ${c.committed ? "ok" : "warn"}` }, c.committed ? "committed" : "partial")),
    el("td", { class: "mono wrap small" }, c.uri),
  )) : [el("tr", null, el("td", { colspan: 3, class: "muted" }, "No checkpoints yet."))]));

  renderLastAct(events || []);
  const evs = [...(events || [])].sort((a, b) => (b.at < a.at ? -1 : b.at > a.at ? 1 : b.id - a.id));
  $("detail-events").replaceChildren(...(evs.length ? evs.map((e) => el("li", { "data-kind": e.kind, class: `ev ev-${e.kind}` },
    el("div", { class: "ev-head" },
      el("span", { class: "ev-kind" }, e.kind),
      e.pod ? el("span", { class: "muted" }, e.pod) : null,
      e.by ? el("span", { class: "ev-by", "data-by": e.by }, `by ${e.by}`) : null,
      el("time", { datetime: e.at, title: e.at }, fmtTime(e.at))),
    el("div", { class: "ev-msg" }, e.message),
  )) : [el("li", { class: "muted" }, "No events.")]));
}

export async function refreshDetail() {
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
    keepLogCurrent();
    if (ui.jobsById.has(detail.id)) updateJobRow(upsertJob(detail));
  } catch (e) {
    if (!(e instanceof HttpError)) throw e;
    if (ui.selected !== id) return;
    $("detail-error").textContent = e.status === 404 ? "This job no longer exists." : `Could not load the job: ${e.message}`;
    $("detail-error").hidden = false;
  }
}

/** The panel's actions again, for whoever you now are: the server says which are yours. */
export function syncDetailActions() {
  if (ui.selected) refreshDetail().catch(() => setConn(false));
}

/**
 * The actions the server sent with `job` (GET /jobs/{id}'s `actions` and `refused_actions`:
 * what its state allows, and whether you may), as a map from each action to null when it is
 * yours or to the refusal that says who may. The page derives none of it from the state.
 */
function offered(job) {
  const offers = new Map();
  if (!job) return offers;
  for (const action of job.actions || []) offers.set(action, null);
  for (const refused of job.refused_actions || []) offers.set(refused.action, refused);
  return offers;
}

/** "only alice or an admin may cancel or suspend this job", from the server's refusal. */
function whyNot(refused, verbs) {
  return `only ${refused.only} may ${verbs} this job${refused.because ? ` (${refused.because})` : ""}`;
}

// The verb a sentence says an action with.
const VERB = { requeue_ignoring_stop_rules: "requeue", reprioritise: "reprioritise" };
const verbOf = (action) => VERB[action] || action;

/**
 * Shows the actions the server sent for the open job, those refused to you disabled (saying
 * why, on the buttons and beside them).
 */
export function setDetailActions(job) {
  const offers = offered(job);
  // A run a rule stopped would be judged the same way again if requeued with its rules: the
  // button runs it on without them (`?ignore_stop_rules=true`), when the server offers that.
  const lift = offers.has("requeue_ignoring_stop_rules") && Boolean(job && job.stopped_by);
  const requeueAction = lift ? "requeue_ignoring_stop_rules" : "requeue";
  const cancel = $("detail-cancel");
  const requeue = $("detail-requeue");
  const buttons = [[cancel, "cancel"], [requeue, requeueAction], [$("detail-suspend"), "suspend"],
    [$("detail-resume"), "resume"]];
  const refused = buttons.map(([, action]) => offers.get(action)).filter(Boolean);
  const verbs = [...new Set(buttons.filter(([, action]) => offers.get(action)).map(([, action]) => verbOf(action)))];
  const why = refused.length ? whyNot(refused[0], verbs.join(" or ")) : null;
  const cancellable = offers.has("cancel");
  if (!cancellable || offers.get("cancel")) $("detail-cancel-confirm").hidden = true;
  cancel.hidden = !cancellable || !$("detail-cancel-confirm").hidden;
  requeue.hidden = !offers.has(requeueAction);
  $("detail-suspend").hidden = !offers.has("suspend");
  $("detail-resume").hidden = !offers.has("resume");
  requeue.dataset.lift = lift ? "true" : "false";
  requeue.textContent = lift ? "Run on without its rules" : "Requeue";
  for (const [button, action] of [...buttons, [$("detail-change-apply"), "reprioritise"]]) {
    const no = offers.get(action);
    button.disabled = Boolean(no);
    button.title = no ? `${whyNot(no, verbOf(action))}; ${youAre()}` : "";
  }
  setChangeForm(job, offers);
  const line = $("detail-why");
  line.textContent = why || "";
  line.hidden = !why;
}

/**
 * The class and priority form, for a job the server offers `reprioritise` for: every class of
 * the suite, those you may not use disabled and saying so (a class that may evict is an
 * admin's unless the suite says otherwise).
 */
function setChangeForm(job, offers) {
  const form = $("detail-change");
  const shown = Boolean(job && offers.has("reprioritise") && me.classes.length);
  form.hidden = !shown;
  if (!shown) return;
  const no = offers.get("reprioritise");
  const select = $("detail-class");
  const priority = $("detail-priority");
  select.disabled = Boolean(no);
  priority.disabled = Boolean(no);
  if (form.dataset.job !== job.id) {
    form.dataset.job = job.id;
    form.dataset.edited = "";
  }
  // What the person has chosen and not sent yet stays as they left it.
  if (form.dataset.edited === "true") return;
  select.replaceChildren(...me.classes.map((c) => el("option", {
    value: c.name,
    disabled: !c.allowed && c.name !== job.priority_class,
    title: c.allowed ? null : `not yours to use; ${youAre()}`,
    selected: c.name === job.priority_class,
  }, c.allowed || c.name === job.priority_class ? c.name : `${c.name} (not yours to use)`)));
  priority.value = String(job.priority ?? 0);
}

/**
 * Cancels, requeues, suspends, resumes or (`change`) moves the open job to the form's class
 * and priority; `changed(id)` brings the page up to date after. The server checks again.
 */
export async function jobAction(action, changed) {
  const id = ui.selected;
  if (!id) return;
  const [doing, done, refused] = SAYS[action];
  const status = $("detail-action-status");
  status.textContent = doing;
  $("detail-cancel-confirm").hidden = true;
  try {
    const path = `/jobs/${encodeURIComponent(id)}`;
    let answer;
    if (action === "change") {
      const priority = Number.parseInt($("detail-priority").value, 10);
      answer = await change("PATCH", path, {
        priority_class: $("detail-class").value,
        priority: Number.isFinite(priority) ? priority : undefined,
      });
    } else {
      const lift = action === "requeue" && $("detail-requeue").dataset.lift === "true" ? "?ignore_stop_rules=true" : "";
      answer = await change("POST", `${path}/${action}${lift}`);
    }
    if (action === "change") $("detail-change").dataset.edited = "";
    status.textContent = done(answer);
    await changed(id);
  } catch (e) {
    status.textContent = `${refused}: ${e.message}`;
  }
}

export function openJob(id, push = true) {
  if (!id) return;
  const changed = ui.panelJob !== id;
  const was = ui.selected;
  ui.selected = id;
  ui.panelJob = id;
  writeHash(push && was !== id);
  const panel = $("job-detail");
  if (changed) {
    stopLog(); // the log that shows is the new job's, from its first read
    const job = ui.jobsById.get(id);
    $("detail-experiment").textContent = job ? job.experiment : "…";
    $("detail-state").replaceChildren(job ? badge(job.state) : "");
    $("detail-sub").textContent = job ? `${job.group} · ${job.id}` : id;
    for (const part of ["detail-facts", "detail-charts", "detail-latest", "detail-events"]) $(part).replaceChildren();
    for (const t of ["detail-attempts", "detail-checkpoints"]) $(t).tBodies[0].replaceChildren();
    $("detail-body").scrollTop = 0;
    $("detail-action-status").textContent = "";
    renderLastAct([]);
    $("detail-cancel-confirm").hidden = true;
    setDetailActions(job || null);
  }
  panel.hidden = false;
  $("detail-backdrop").hidden = false;
  document.body.classList.add("detail-open");
  markSelectedRows();
  refreshDetail().catch(() => setConn(false));
}

export function closeJob(push = true) {
  closeLog();
  ui.selected = null;
  ui.panelJob = null;
  writeHash(push);
  $("job-detail").hidden = true;
  $("detail-backdrop").hidden = true;
  document.body.classList.remove("detail-open");
  markSelectedRows();
}
