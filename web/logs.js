// The job panel's log: what the trainer printed, for the chosen host, attempt and search,
// read again every second while "follow" is ticked.

import { HttpError, getJSON } from "./api.js";
import { $, el } from "./dom.js";
import { fmtInt } from "./format.js";
import { ui } from "./state.js";

/** Lines the log view holds at most; the oldest leave first. */
const LOG_VIEW_LINES = 3000;
const LOG_POLL_MS = 1000;
const logView = { key: null, after: null, lines: 0, timer: null, busy: false };

function logQueryKey() {
  return [ui.panelJob, $("log-host").value, $("log-attempt").value, $("log-grep").value].join("\u0000");
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

/** Reads what is new in the open job's log and appends it; starts with the newest lines. */
export async function pollLog() {
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

/** After the panel refreshed: a new query starts over; a followed log not read resumes. */
export function keepLogCurrent() {
  if (logView.key !== logQueryKey() || (!logView.timer && !logView.busy && $("log-follow").checked)) pollLog();
}

/** The panel closed: stop, and start afresh when it opens again. */
export function closeLog() {
  clearTimeout(logView.timer);
  logView.timer = null;
  logView.key = null;
}
