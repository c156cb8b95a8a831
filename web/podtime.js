// Pod time: where it went (a stacked bar per run, attempt, pod or grant), goodput, and the
// checkpoint advice that would waste less of it.

import { el } from "./dom.js";
import { fmtDuration, fmtInt } from "./format.js";

/** Goodput as "92% kept · 1h 3m lost · 5m overhead", or null when there is nothing to say. */
export function goodputText(g) {
  if (!g || g.ratio === null || g.ratio === undefined) return null;
  const parts = [`${(100 * g.ratio).toFixed(g.ratio >= 0.995 || g.ratio < 0.1 ? 0 : 1)}% goodput`];
  if (g.lost_s > 0) parts.push(`${fmtDuration(g.lost_s * 1000)} lost`);
  if (g.overhead_s > 0) parts.push(`${fmtDuration(g.overhead_s * 1000)} overhead`);
  return parts.join(" · ");
}

/** The causes of pod time in display order, as the API names them (`${cause}_s`). */
const POD_TIME_CAUSES = ["provisioning", "setup", "startup", "restore", "productive", "save", "wasted", "stopping", "evicted", "idle"];

/** One stacked bar of where `time` (a PodTime) went, each cause a segment as wide as its share. */
export function podTimeBar(label, time) {
  const total = time && time.total_s > 0 ? time.total_s : 0;
  const row = el("div", { class: "pt-row", "data-pod-time": label, "data-total-s": String(total) },
    el("span", { class: "pt-label" }, label));
  const bar = el("div", { class: "pt-bar", role: "img" });
  const parts = [];
  for (const cause of POD_TIME_CAUSES) {
    const s = total ? time[`${cause}_s`] || 0 : 0;
    if (s <= 0) continue;
    const share = (100 * s) / total;
    parts.push(`${cause} ${fmtDuration(s * 1000)} (${share.toFixed(share < 1 ? 1 : 0)}%)`);
    bar.append(el("span", { class: `pt-seg pt-${cause}`, "data-cause": cause, "data-seconds": String(s),
      style: `width:${share.toFixed(3)}%`, title: `${cause}: ${fmtDuration(s * 1000)}` }));
  }
  bar.setAttribute("aria-label", total ? `${label}: ${parts.join(", ")}` : `${label}: no pod time yet`);
  row.append(bar, el("span", { class: "pt-total mono" }, total ? fmtDuration(total * 1000) : "–"));
  row.title = parts.join(" · ");
  return row;
}

export function podTimeLegend() {
  return el("div", { class: "pt-legend" }, ...POD_TIME_CAUSES.map((c) =>
    el("span", { class: "pt-key" }, el("span", { class: `pt-swatch pt-${c}` }), c)));
}

export function adviceText(a) {
  if (!a) return "";
  const how = a.auto ? "checkpoint_interval: auto, so each attempt follows the advice" : `advised ${fmtInt(a.interval_steps_advised)} steps`;
  return `Checkpoints every ${fmtInt(a.interval_steps_now)} steps; ${how} ` +
    `(save ${a.save_cost_s.toFixed(1)} s, ${a.save_cost_source}; pod MTBF ${fmtDuration(a.mtbf_s * 1000)}). ` +
    (a.auto ? "" : `The advised interval would save ${a.pod_hours_saved.toFixed(1)} pod-hours.`);
}

/** The sequential phases of a recovery, and the parts of two of them, as the API names them. */
const RECOVERY_PHASES = [["stopping"], ["waiting", "creating"], ["setup"], ["startup", "compile"], ["restore"]];

/**
 * One line per slice type, zone and cause of `GET /recoveries`' summary: the median recovery,
 * its p95, and each phase's median (a part in brackets after its phase).
 */
export function recoveryLines(summary) {
  if (!summary || summary.length === 0) {
    return [el("p", { class: "muted", "data-recovery": "none" }, "No interruption recovered from yet.")];
  }
  const s = (x) => fmtDuration(x * 1000);
  return summary.map((r) => {
    const p = r.phases_p50;
    const phases = RECOVERY_PHASES.map(([phase, part]) =>
      `${phase} ${s(p[`${phase}_s`])}` + (part ? ` (${part} ${s(p[`${part}_s`])})` : "")).join(" · ");
    const where = r.zone ? `${r.accelerator} in ${r.zone}` : r.accelerator;
    const n = `${fmtInt(r.count)} ${r.count === 1 ? "recovery" : "recoveries"}`;
    return el("p", { class: "recovery", "data-recovery": `${r.accelerator}/${r.zone || ""}/${r.cause}`,
      "data-p50-s": String(r.p50_s) },
      `${where}, ${r.cause}: median recovery ${s(r.p50_s)} (p95 ${s(r.p95_s)}) over ${n}: ${phases}`);
  });
}
