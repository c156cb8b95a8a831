// The page's connection: how it keeps current (live on the event stream, the slow fallback
// poll while the stream is down, or the old full refresh every `?poll=` ms) and the top bar's
// indicator and banner that say so.

import { HttpError } from "./api.js";
import { $ } from "./dom.js";
import { fmtDuration, fmtTime } from "./format.js";

const QUERY = new URLSearchParams(location.search);
/** Old-style polling interval in ms (`?poll=2000`); 0 = live updates through the stream. */
export const POLL_MS = Math.max(0, Number(QUERY.get("poll")) || 0);
export const FALLBACK_POLL_MS = 60000;

export const conn = {
  mode: POLL_MS ? "poll" : "connecting", // live | fallback | poll | connecting
  lastOk: null,
};

/** Shows whether the last refresh reached the server, and how the page keeps current. */
export function setConn(ok, error) {
  const box = $("conn");
  box.dataset.ok = ok ? "true" : "false";
  box.dataset.mode = conn.mode;
  document.body.dataset.status = ok ? "ok" : "error";
  $("live-mode").textContent = {
    live: "live",
    fallback: `stream lost, refreshing every ${FALLBACK_POLL_MS / 1000} s ·`,
    poll: `polling every ${fmtDuration(POLL_MS)} ·`,
    connecting: "",
  }[conn.mode];
  if (conn.mode === "live") $("live-mode").textContent = "live ·";
  const banner = $("conn-banner");
  if (ok) {
    conn.lastOk = new Date();
    banner.hidden = true;
    $("last-updated").textContent = `updated ${fmtTime(conn.lastOk.toISOString())}`;
  } else {
    banner.hidden = false;
    banner.textContent = !(error instanceof HttpError) ? "server unreachable, retrying"
      : error.status === 401 ? `a token is needed: ${error.message}`
      : `server error (${error.message}), retrying`;
    $("last-updated").textContent = conn.lastOk ? `last update ${fmtTime(conn.lastOk.toISOString())}` : "not connected";
  }
}
