// Keeping the page current. It follows the server's event stream (GET /api/v1/events/stream,
// server-sent events): each event makes the page refetch only what it concerns (the job, its
// group, the status counts, the plan). If the stream breaks, a slow poll keeps the page
// current until it is back; `?poll=<ms>` keeps the old full refresh instead of the stream.
// The stream is read through fetch (sse.js), so it carries your token as every call does.

import { API, HttpError, getJSON } from "./api.js";
import { FALLBACK_POLL_MS, POLL_MS, conn, setConn } from "./conn.js";
import { renderGroups, renderJobs, setJobs, updateJobRow, upsertJob } from "./jobs.js";
import { refreshDetail, setDetailActions } from "./panel.js";
import { PLAN_REFRESH_MS, refreshPlan, schedulePlan } from "./plan.js";
import { openEventStream } from "./sse.js";
import { renderRunning, renderStatus } from "./status.js";
import { ui } from "./state.js";
import { loadStudy, scheduleSeries, scheduleStudy, studyConcerns } from "./study.js";

const STREAM_OPEN_GRACE_MS = 3000;
/** How soon a stream that dropped is opened again; a refused one waits longer. */
const STREAM_RETRY_MS = 3000;
const STREAM_REFUSED_RETRY_MS = 10000;

const live = {
  stream: null,
  retryTimer: null,
  fallbackTimer: null,
  lastEventId: null,
};

/** Everything the current view shows, fetched again. */
export async function fullRefresh() {
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
export async function tick() {
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
    if (ui.selected === id) setDetailActions(job);
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
  clearTimeout(live.retryTimer);
  live.retryTimer = null;
  const stream = openEventStream(`${API}/events/stream`, {
    lastEventId: live.lastEventId,
    onOpen() {
      if (live.stream !== stream) return;
      conn.mode = "live";
      stopFallback();
      // Whatever happened while the stream was down (or before it opened) is fetched once.
      tick();
    },
    onMessage(type, data, id) {
      if (live.stream !== stream) return;
      let item;
      try { item = JSON.parse(data); } catch (_) { return; }
      if (type === "event") {
        live.lastEventId = id || live.lastEventId;
        onStreamEvent(item);
      } else if (type === "progress") {
        onProgress(item);
      }
    },
    onEnd(error) {
      if (live.stream !== stream) return;
      live.stream = null;
      conn.mode = "fallback";
      setConn(document.body.dataset.status !== "error");
      startFallback();
      // A dropped connection is tried again soon; a refusal (a token needed, say) later.
      const wait = error instanceof HttpError ? STREAM_REFUSED_RETRY_MS : STREAM_RETRY_MS;
      live.retryTimer = setTimeout(connectStream, wait);
    },
  });
  live.stream = stream;
}

/** A job the page changed (cancelled, requeued): its row, its panel's buttons, the counts. */
export async function jobChanged(id) {
  await refreshJob(id);
  scheduleStatus();
}

/** Starts keeping the page current: the plan's clock, then the stream or the old polling. */
export function startLive() {
  refreshPlan();
  setInterval(refreshPlan, PLAN_REFRESH_MS);
  if (POLL_MS) {
    pollLoop();
  } else {
    connectStream();
    // A stream that does not open soon: show the page anyway, and keep it current slowly.
    setTimeout(() => { if (conn.mode !== "live") { tick(); startFallback(); } }, STREAM_OPEN_GRACE_MS);
  }
}

/** Everything fetched again, and the stream opened again, as whoever the token now names. */
export function restartLive() {
  refreshPlan();
  if (POLL_MS) {
    tick();
    return;
  }
  const old = live.stream;
  live.stream = null;
  if (old) old.close();
  connectStream();
}
