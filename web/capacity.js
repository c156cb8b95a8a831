// The capacity card: each pool's slices and zones (GET /api/v1/pools), hidden while no pool
// has reported. Zones are the waterfall a pool moves down: ready, stockout, quota, churn or
// paused, with when a blocked one is tried again. Pools of every generation are shown, each
// with the demand it was given and the demand it passed on to a later type of a job's list.

import { getJSON } from "./api.js";
import { $, el } from "./dom.js";
import { fmtAgo, fmtDuration } from "./format.js";

const REFRESH_MS = 5000;

function zonePill(state) {
  const kind = state === "ready" ? "ok" : state === "paused" ? "bad" : "warn";
  return el("span", { class: `pill ${kind}` }, state);
}

function slicePill(state) {
  const kind = state === "ready" ? "ok" : state === "preempted" ? "bad" : "warn";
  return el("span", { class: `pill ${kind}` }, state);
}

function renderPool(pool) {
  const passed = pool.demand_passed_on || 0;
  const head = el("div", { class: "pool-head" },
    el("span", { class: "pod-name" }, pool.name),
    el("span", { class: "muted", "data-demand": pool.demand, "data-passed-on": passed },
      `${pool.accelerator} · ${pool.slices.length} of ${pool.max_slices} slices · ` +
      `${pool.demand} job${pool.demand === 1 ? "" : "s"} waiting` +
      (passed ? ` · ${passed} passed on to another type (no zone can make a slice)` : "") +
      ` · ${fmtDuration(pool.slice_hours * 3600 * 1000)} of slice time paid`));
  const paused = pool.paused
    ? el("div", { class: "pool-paused", role: "status" }, `paused: ${pool.paused}`)
    : null;
  const slices = pool.slices.length
    ? el("ul", { class: "pool-slices" }, ...pool.slices.map((s) =>
      el("li", { "data-slice": s.pod, "data-slice-state": s.state },
        el("span", { class: "pod-name" }, s.pod),
        el("span", { class: "muted" }, s.zone),
        slicePill(s.state),
        s.idle_since ? el("span", { class: "muted", title: s.idle_since }, `idle ${fmtAgo(s.idle_since)}`) : null)))
    : el("p", { class: "empty" }, "No slice: it makes one when jobs wait.");
  const zones = el("ul", { class: "pool-zones" }, ...pool.zones.map((z) =>
    el("li", { "data-zone": z.zone, "data-zone-state": z.state, title: z.last_error || "" },
      el("span", null, z.zone),
      zonePill(z.state),
      z.next_try_at ? el("span", { class: "muted" }, `tried again ${new Date(z.next_try_at).toLocaleTimeString()}`) : null)));
  return el("div", { class: "pool", "data-pool": pool.name }, head, paused, slices, zones);
}

/** Fetches the pools and shows them; the card stays hidden while there are none. */
export async function refreshCapacity() {
  const page = await getJSON("/pools");
  const card = $("capacity");
  card.hidden = page.pools.length === 0;
  $("pools").replaceChildren(...page.pools.map(renderPool));
}

/** Keeps the card fresh: zones come back from a backoff without any event. */
export function startCapacity() {
  const again = () => refreshCapacity().catch(() => {}).finally(() => setTimeout(again, REFRESH_MS));
  again();
}
