// The SVG charts: the plan's timeline, the study's chart of a group's runs, and the job
// panel's small line charts. Each draws what it is given; what to draw is its caller's.

import { fmtDate, fmtInt, fmtNum } from "./format.js";

const SVG_NS = "http://www.w3.org/2000/svg";

/** Creates an SVG element with attributes; a string child becomes its text. */
function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    // Through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    if (key === "style") node.style.cssText = String(value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function runClass(run) {
  if (run.state === "succeeded" || run.state === "stopped") return "done";
  if (run.fits_deadline === true) return "fit";
  if (run.fits_deadline === false) return "late";
  if (["failed", "held", "cancelled"].includes(run.state)) return "norun";
  return "nodeadline";
}

/** Runs spread over lanes (one per pod) so that runs running at once do not overlap. */
function lanesOf(runs, pods) {
  const lanes = Array.from({ length: Math.max(1, pods) }, () => ({ end: -Infinity, runs: [] }));
  const sorted = [...runs].sort((a, b) => new Date(a.start) - new Date(b.start));
  for (const run of sorted) {
    const start = new Date(run.start).getTime();
    let lane = lanes.find((l) => l.end <= start + 1000);
    if (!lane) lane = lanes.reduce((a, b) => (a.end <= b.end ? a : b));
    lane.runs.push(run);
    lane.end = Math.max(lane.end, new Date(run.end).getTime());
  }
  return lanes.filter((l) => l.runs.length);
}

/** The plan's timeline: each order's runs on lanes against now and the deadline. */
export function drawTimeline(svg, plan) {
  const W = 720, L = 104, R = 14, T = 18, laneH = 13, gap = 10;
  const orders = [["Today", plan.current], ["Recommended", plan.recommended]];
  const now = new Date(plan.now).getTime();
  const deadline = plan.deadline ? new Date(plan.deadline).getTime() : null;
  let end = now + 3600e3;
  for (const [, proj] of orders) for (const r of proj.runs) end = Math.max(end, new Date(r.end).getTime());
  if (deadline) end = Math.max(end, deadline + (end - now) * 0.02);
  const sx = (t) => L + ((t - now) / (end - now)) * (W - L - R);
  const lanesByOrder = orders.map(([label, proj]) => [label, lanesOf(proj.runs.filter((r) => r.state !== "succeeded" && r.state !== "stopped"), plan.pods)]);
  let y = T;
  const parts = [];
  for (const [label, lanes] of lanesByOrder) {
    const top = y;
    const rows = Math.max(1, lanes.length);
    parts.push(svgEl("text", { x: L - 8, y: top + (rows * laneH) / 2 + 4, class: "t-label", "text-anchor": "end" }, label));
    lanes.forEach((lane, i) => {
      for (const run of lane.runs) {
        const x0 = sx(new Date(run.start).getTime());
        const x1 = Math.max(x0 + 1, sx(new Date(run.end).getTime()));
        parts.push(svgEl("rect", {
          x: x0.toFixed(1), y: top + i * laneH + 1, width: Math.max(1, x1 - x0 - 0.6).toFixed(1), height: laneH - 2,
          class: `t-run ${runClass(run)}`, "data-order": label.toLowerCase(), "data-experiment": run.experiment,
        }, svgEl("title", null, `${run.experiment} (${run.group}): ${fmtDate(run.start)} → ${fmtDate(run.end)}, ` +
          `${fmtNum(run.remaining_hours)} pod-hours to go (${run.estimate === "measured" ? "measured rate" : "group.yaml estimate"})` +
          (run.fits_deadline === true ? ", fits" : run.fits_deadline === false ? ", ends after the deadline" : ""))));
      }
    });
    if (!lanes.length) parts.push(svgEl("text", { x: L + 4, y: top + laneH - 3, class: "t-tick" }, "nothing left to run"));
    y += rows * laneH + gap;
  }
  const H = y + 14;
  parts.push(svgEl("line", { x1: L, y1: T - 4, x2: L, y2: y - gap + 3, class: "t-axis" }));
  parts.push(svgEl("text", { x: L, y: H - 2, class: "t-tick", "text-anchor": "start" }, "now"));
  parts.push(svgEl("text", { x: W - R, y: H - 2, class: "t-tick", "text-anchor": "end" }, fmtDate(new Date(end).toISOString(), true)));
  if (deadline) {
    const x = sx(deadline);
    parts.push(svgEl("line", { x1: x, y1: T - 10, x2: x, y2: y - gap + 4, class: "t-deadline", "data-deadline": plan.deadline }));
    parts.push(svgEl("text", { x: x + 3, y: T - 8, class: "t-deadline-label", "text-anchor": x > W - 160 ? "end" : "start" },
      `deadline ${fmtDate(plan.deadline)}`));
  }
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren(...parts);
}

function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/**
 * The study's chart: `curves` ({ row, color, pts, marks }, one per run) against step or
 * pod-hours, each with its interruption (▼) and resume (○) marks, and a mark at each rung it
 * reached: ◆ promoted, ◇ waiting (paused), ✕ pruned.
 */
export function drawStudyChart(svg, curves, { metric, xAxis, smooth, runs }) {
  const hours = xAxis === "hours";
  const W = 960, H = 380, L = 64, R = 18, T = 16, B = 44;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.dataset.metric = metric;
  svg.dataset.x = xAxis;
  svg.dataset.smooth = String(smooth);

  const all = curves.flatMap((c) => c.pts);
  const marksAll = curves.flatMap((c) => c.marks);
  const parts = [];
  svg.setAttribute("aria-label", `${metric} against ${hours ? "pod-hours" : "step"} for ${curves.filter((c) => c.pts.length).length} runs`);
  if (!all.length) {
    parts.push(svgEl("text", { x: W / 2, y: H / 2, class: "c-empty", "text-anchor": "middle" },
      runs ? `no ${metric} points yet` : "no run of this group has started"));
    svg.replaceChildren(...parts);
    return;
  }
  let x0 = Math.min(...all.map((p) => p.x), ...marksAll.map((m) => m.x));
  let x1 = Math.max(...all.map((p) => p.x), ...marksAll.map((m) => m.x));
  if (!hours) x0 = Math.min(0, x0);
  else x0 = 0;
  let y0 = Math.min(...all.map((p) => Math.min(p.y, p.raw))), y1 = Math.max(...all.map((p) => Math.max(p.y, p.raw)));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { const d = Math.abs(y0) * 0.05 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.04;
  y0 -= pad; y1 += pad;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);

  for (const v of niceTicks(y0, y1)) {
    parts.push(svgEl("line", { x1: L, y1: sy(v).toFixed(1), x2: W - R, y2: sy(v).toFixed(1), class: "c-grid" }));
    parts.push(svgEl("text", { x: L - 6, y: (sy(v) + 3).toFixed(1), class: "c-label", "text-anchor": "end" }, fmtNum(v)));
  }
  for (const v of niceTicks(x0, x1, 6)) {
    parts.push(svgEl("line", { x1: sx(v).toFixed(1), y1: H - B, x2: sx(v).toFixed(1), y2: H - B + 4, class: "c-axis" }));
    parts.push(svgEl("text", { x: sx(v).toFixed(1), y: H - B + 16, class: "c-label", "text-anchor": "middle" }, hours ? fmtNum(v) : fmtInt(v)));
  }
  parts.push(svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "c-axis" }));
  parts.push(svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, class: "c-axis" }));
  parts.push(svgEl("text", { x: (L + W - R) / 2, y: H - 6, class: "c-axis-title", "text-anchor": "middle" }, hours ? "pod-hours" : "step"));
  parts.push(svgEl("text", { x: 12, y: (T + H - B) / 2, class: "c-axis-title", "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, metric));

  for (const c of curves) {
    const g = svgEl("g", {
      class: "curve", "data-experiment": c.row.experiment, "data-job-id": c.row.run_id,
      "data-points": c.pts.length, "data-last-step": c.pts.length ? c.pts[c.pts.length - 1].step : "",
      style: `--curve:${c.color}`,
    }, svgEl("title", null, c.row.experiment));
    if (c.pts.length) {
      if (smooth > 0) {
        const rawPts = c.pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.raw).toFixed(1)}`).join(" ");
        g.append(svgEl("polyline", { points: rawPts, class: "s-raw" }));
      }
      g.append(svgEl("polyline", { points: c.pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" "), class: "s-line" }));
      const last = c.pts[c.pts.length - 1];
      g.append(svgEl("circle", { cx: sx(last.x).toFixed(1), cy: sy(last.y).toFixed(1), r: 3, class: "s-dot" }));
    }
    for (const m of c.marks) {
      const x = sx(m.x), y = sy(m.y);
      const attrs = { class: `mark mark-${m.role}`, "data-marker": m.kind, "data-step": m.step, "data-job-id": c.row.run_id };
      let shape;
      if (m.role === "stop") {
        shape = svgEl("path", { ...attrs, d: `M${(x - 5).toFixed(1)},${(y - 11).toFixed(1)} h10 l-5,8 z` });
      } else if (m.role === "rung") {
        // A rung: a cross where the run was pruned, else a diamond (hollow while it waits).
        const d = m.kind === "pruned"
          ? `M${(x - 5).toFixed(1)},${(y - 5).toFixed(1)} l10,10 m0,-10 l-10,10`
          : `M${x.toFixed(1)},${(y - 6).toFixed(1)} l6,6 l-6,6 l-6,-6 z`;
        shape = svgEl("path", { ...attrs, class: `mark mark-rung rung-${m.kind}`, "data-marker": "rung", "data-rung": m.rung, "data-verdict": m.kind, d });
      } else {
        shape = svgEl("circle", { ...attrs, cx: x.toFixed(1), cy: y.toFixed(1), r: 4.5 });
      }
      shape.append(svgEl("title", null, m.title));
      g.append(shape);
    }
    parts.push(g);
  }
  svg.replaceChildren(...parts);
}

/** A small chart of one metric against step, with its newest value. */
export function lineChart(name, points) {
  const W = 320, H = 132, L = 48, R = 10, T = 26, B = 22;
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", "data-metric": name, role: "img" });
  const text = (x, y, str, cls, anchor = "start") => svg.append(svgEl("text", { x, y, class: cls, "text-anchor": anchor }, str));
  const line = (x1, y1, x2, y2, cls) => svg.append(svgEl("line", { x1, y1, x2, y2, class: cls }));
  text(4, 14, name, "c-title");
  // A non-finite value comes as "NaN", "Infinity" or "-Infinity": the curve stops
  // there and a red mark at the top says where the run diverged.
  const pts = (points || []).filter((p) => Number.isFinite(p.value));
  const bad = (points || []).filter((p) => typeof p.value === "string");
  svg.setAttribute("aria-label", `${name}: ${pts.length} points` + (bad.length ? `, non-finite from step ${bad[0].step}` : ""));
  if (pts.length === 0 && bad.length === 0) {
    text(W / 2, H / 2 + 6, "no data yet", "c-empty", "middle");
    return svg;
  }
  const steps = [...pts, ...bad].map((p) => p.step);
  let [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  let y0 = pts.length ? Math.min(...pts.map((p) => p.value)) : 0, y1 = pts.length ? Math.max(...pts.map((p) => p.value)) : 1;
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.05 || 1; y0 -= d; y1 += d; }
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  line(L, T, W - R, T, "c-grid");
  line(L, H - B, W - R, H - B, "c-axis");
  line(L, T, L, H - B, "c-axis");
  text(L - 4, T + 4, fmtNum(y1), "c-label", "end");
  text(L - 4, H - B, fmtNum(y0), "c-label", "end");
  text(L, H - 6, fmtInt(x0), "c-label", "start");
  text(W - R, H - 6, `step ${fmtInt(x1)}`, "c-label", "end");
  if (pts.length) {
    svg.append(svgEl("polyline", { points: pts.map((p) => `${sx(p.step).toFixed(1)},${sy(p.value).toFixed(1)}`).join(" "), class: "c-line" }));
  }
  for (const p of bad) line(sx(p.step).toFixed(1), T, sx(p.step).toFixed(1), T + 6, "c-nonfinite");
  const newest = [...pts, ...bad].reduce((a, b) => (b.step > a.step ? b : a));
  if (typeof newest.value === "string") {
    text(W - R, 14, newest.value, "c-last c-nonfinite-text", "end");
  } else {
    svg.append(svgEl("circle", { cx: sx(newest.step).toFixed(1), cy: sy(newest.value).toFixed(1), r: 2.5, class: "c-dot" }));
    text(W - R, 14, fmtNum(newest.value), "c-last", "end");
  }
  return svg;
}
