// The job panel's log: what the trainer printed, for the chosen host, attempt and search.
//
// The newest lines come first, from GET /api/v1/jobs/{id}/logs?tail=true (which also says
// what the server dropped). While "follow" is ticked, every later line arrives through
// GET /api/v1/jobs/{id}/logs/follow, one streamed request (NDJSON `LogLine`s) that stays open
// until the job settles. Each line's id is the cursor: a stream that breaks is opened again
// with `after` = the last line shown, so no line shows twice and none goes missing. A settled
// job's stream ends; the panel's next refresh (a requeue, say) follows it again from there.
// Like every call of the page, these carry your token when you gave one.

import { API, HttpError, getJSON, httpError, withToken } from "./api.js";
import { $, el } from "./dom.js";
import { fmtInt } from "./format.js";
import { ui } from "./state.js";

/** Lines the log view holds at most; the oldest leave first. */
const LOG_VIEW_LINES = 3000;
/** Lines the first read shows, and lines per read after it. */
const TAIL_LINES = 500;
const PAGE_LINES = 2000;
/** Waits before following again after the stream ended or broke, longer each time in a row. */
const RETRY_MS = [1000, 2000, 5000, 10000];

const logView = {
  key: null, // the query the view shows: job, host, attempt, search
  after: null, // the last line's id (the cursor), or null before the first read
  lines: 0,
  reading: null, // the AbortController of the read or stream under way
  retry: null, // the timer that follows again
  failures: 0, // ends and breaks in a row, for the wait before the next try
};

function logQueryKey() {
  return [ui.panelJob, $("log-host").value, $("log-attempt").value, $("log-grep").value].join("\u0000");
}

/** The query's parameters: host, attempt and search as the controls say. */
function logQuery() {
  const q = new URLSearchParams();
  q.set("host", $("log-host").value);
  if ($("log-attempt").value) q.set("attempt", $("log-attempt").value);
  if ($("log-grep").value) q.set("grep", $("log-grep").value);
  return q;
}

/** Host and attempt choices: the pods' hosts and the job's attempts, keeping the selection. */
export function setLogChoices(detail) {
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

/** Stops reading and following (the lines shown stay). */
export function stopLog() {
  if (logView.reading) logView.reading.abort();
  logView.reading = null;
  clearTimeout(logView.retry);
  logView.retry = null;
}

/** The panel closed: stop, and start afresh when it opens again. */
export function closeLog() {
  stopLog();
  logView.key = null;
}

/** After the panel refreshed: a new query starts over; a followed log not read resumes. */
export function keepLogCurrent() {
  const idle = !logView.reading && !logView.retry;
  if (logView.key !== logQueryKey() || (idle && $("log-follow").checked)) followLog();
}

/**
 * Shows the open job's log as the controls ask: a new query starts over from the newest
 * lines; with "follow" ticked, new lines stream in; unticked, what is shown stays.
 */
export function followLog() {
  const id = ui.panelJob;
  if (!id || $("job-detail").hidden) return;
  const key = logQueryKey();
  if (key !== logView.key) {
    stopLog();
    logView.key = key;
    logView.after = null;
    logView.lines = 0;
    logView.failures = 0;
    $("detail-log").replaceChildren();
    $("log-status").textContent = "";
  } else if (!$("log-follow").checked) {
    stopLog();
  }
  if (logView.reading) return;
  clearTimeout(logView.retry);
  logView.retry = null;
  read(id, key);
}

/** The first page (if none was read yet), then the stream while "follow" is ticked. */
async function read(id, key) {
  const ctl = new AbortController();
  logView.reading = ctl;
  const current = () => logView.reading === ctl && logView.key === key && key === logQueryKey();
  let retry = false;
  try {
    const enc = encodeURIComponent(id);
    if (logView.after === null) {
      const q = logQuery();
      q.set("tail", "true");
      q.set("limit", String(TAIL_LINES));
      const page = await getJSON(`/jobs/${enc}/logs?${q}`);
      if (!current()) return; // the query changed meanwhile
      show(page.lines, page);
    } else if (!$("log-follow").checked) {
      // Not following: once, what arrived since the last line shown.
      for (let more = true; more && current();) {
        const q = logQuery();
        q.set("after", String(logView.after));
        q.set("limit", String(PAGE_LINES));
        const page = await getJSON(`/jobs/${enc}/logs?${q}`);
        if (!current()) return;
        show(page.lines);
        more = page.more;
      }
    }
    if (!$("log-follow").checked || !current()) return;
    await stream(`${API}/jobs/${enc}/logs/follow`, ctl, current);
    if (!current()) return;
    // The stream ended: the job settled (or the server is going away). Follow again only
    // while the job may still print; otherwise the panel's next refresh does.
    retry = $("job-detail").dataset.settled !== "true";
  } catch (e) {
    if (!current()) return; // stopped, or the query changed
    $("log-status").textContent = e instanceof HttpError ? e.message : "cannot reach the server";
    // A refused query (a bad search, say) stays refused until the controls change; a server
    // that could not answer (5xx, or no answer) is asked again.
    retry = !(e instanceof HttpError) || e.status >= 500;
  } finally {
    ctl.abort(); // whatever way this read ended, its stream is closed
    if (logView.reading === ctl) {
      logView.reading = null;
      if (retry) {
        const wait = RETRY_MS[Math.min(logView.failures, RETRY_MS.length - 1)];
        logView.failures += 1;
        logView.retry = setTimeout(() => { logView.retry = null; followLog(); }, wait);
      }
    }
  }
}

/** Reads the follow stream from the cursor on, showing each line as it arrives. */
async function stream(url, ctl, current) {
  const q = logQuery();
  q.set("after", String(logView.after));
  q.set("limit", String(PAGE_LINES));
  const headers = withToken({ Accept: "application/json" });
  const resp = await fetch(`${url}?${q}`, {
    headers,
    cache: "no-store",
    signal: ctl.signal,
  });
  if (!resp.ok) throw await httpError(resp, headers);
  if (!current()) return;
  showCount();
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done || !current()) return;
    rest += value;
    const cut = rest.lastIndexOf("\n");
    if (cut < 0) continue;
    const lines = rest.slice(0, cut).split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
    rest = rest.slice(cut + 1);
    show(lines);
    logView.failures = 0;
  }
}

/** Appends lines after the cursor (a line at or before it is shown already), notes first. */
function show(lines, firstPage) {
  const pre = $("detail-log");
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  if (firstPage) {
    for (const d of firstPage.dropped || []) {
      pre.append(el("div", { class: "log-note" }, `attempt ${d.attempt} host ${d.host}: ${fmtInt(d.lines)} older lines dropped (the server keeps the newest ${fmtInt(firstPage.kept_per_host)} per attempt and host)`));
    }
  }
  let shown = 0;
  for (const line of lines) {
    if (logView.after !== null && line.id <= logView.after) continue;
    pre.append(el("div", { class: "log-line", "data-host": String(line.host), "data-attempt": String(line.attempt) },
      el("span", { class: "log-where" }, `[a${line.attempt} h${line.host}] `), line.text));
    shown += 1;
  }
  logView.lines += shown;
  while (pre.childElementCount > LOG_VIEW_LINES) pre.firstElementChild.remove();
  if (firstPage) logView.after = firstPage.next_after;
  else if (lines.length) logView.after = Math.max(logView.after, lines[lines.length - 1].id);
  if (atBottom) pre.scrollTop = pre.scrollHeight;
  showCount();
}

function showCount() {
  $("log-status").textContent = logView.lines === 0 ? "no lines yet" : `${fmtInt(logView.lines)} lines`;
}
