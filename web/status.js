// The overview's summary: the job counts by state, the queue, the pods, and what is running.

import { $, badge, el, progressBar } from "./dom.js";
import { fmtAgo, fmtDuration, fmtInt, fmtNum, stepText } from "./format.js";
import { STATES, jobLink } from "./jobs.js";
import { goodputText } from "./podtime.js";
import { ui } from "./state.js";

/** The summary cards from GET /api/v1/status. */
export function renderStatus(status) {
  ui.status = status;
  renderCounts(status.jobs);
  renderQueue(status);
  renderGoodput(status.goodput);
  renderPods(status.pods);
  renderRunning(status.running);
}

function renderCounts(counts) {
  const box = $("state-counts");
  const total = Object.values(counts || {}).reduce((a, b) => a + b, 0);
  const items = STATES.map((state) => {
    const n = (counts && counts[state]) || 0;
    return el("button", {
      type: "button",
      class: `count state-${state}${n === 0 ? " zero" : ""}${ui.stateFilter === state ? " active" : ""}`,
      "data-state": state,
      "data-count": n,
      title: `show ${state} jobs`,
    }, el("span", { class: "n" }, fmtInt(n)), el("span", { class: "label" }, state));
  });
  items.push(el("div", { class: "count total", "data-state": "total", "data-count": total },
    el("span", { class: "n" }, fmtInt(total)), el("span", { class: "label" }, "total")));
  box.replaceChildren(...items);
}

function renderQueue(status) {
  $("queue-hours").textContent = fmtNum(status.queue_hours);
  if (status.queue_eta) {
    const eta = new Date(status.queue_eta);
    $("queue-eta").textContent = fmtDuration(eta.getTime() - Date.now());
    $("queue-eta-date").textContent = `drains ${eta.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" })}`;
    $("queue-eta").title = status.queue_eta;
  } else {
    $("queue-eta").textContent = "–";
    $("queue-eta-date").textContent = "queue empty";
    $("queue-eta").removeAttribute("title");
  }
}

function renderGoodput(g) {
  const box = $("goodput");
  const text = goodputText(g);
  box.hidden = !text;
  box.textContent = text || "";
  if (g) box.title = `pod time kept ${fmtDuration(g.kept_s * 1000)}, lost ${fmtDuration(g.lost_s * 1000)}, overhead ${fmtDuration(g.overhead_s * 1000)}`;
}

function podStateClass(state) {
  const s = String(state || "").toUpperCase();
  if (s === "READY") return "ok";
  if (["PREEMPTED", "TERMINATED", "FAILED", "DELETED"].includes(s)) return "bad";
  return "warn";
}

function renderPods(pods) {
  const box = $("pods");
  if (!pods || pods.length === 0) {
    box.replaceChildren(el("p", { class: "empty" }, "No pod has reported yet."));
    return;
  }
  box.replaceChildren(...pods.map((pod) => {
    const health = String(pod.health || "");
    const pre = pod.preflight;
    const preText = !pre ? "no preflight" : pre.passed ? "preflight ok" : `preflight failed (${pre.failures.length})`;
    const preTitle = pre && pre.failures && pre.failures.length
      ? pre.failures.map((f) => `${f.host === null || f.host === undefined ? "pod" : `host ${f.host}`}: ${f.check}: ${f.message}`).join("\n")
      : null;
    return el("div", { class: "pod", "data-pod": pod.name, "data-pod-state": pod.state },
      el("div", { class: "pod-line" },
        el("span", { class: "pod-name" }, pod.name),
        el("span", { class: "muted" }, `${pod.accelerator} · ${pod.hosts} hosts`)),
      el("div", { class: "pod-line" },
        el("span", { class: `pill ${podStateClass(pod.state)}` }, pod.state || "?"),
        el("span", { class: `pill ${health.toUpperCase() === "HEALTHY" ? "ok" : "warn"}` }, health || "?"),
        el("span", { class: `pill ${!pre ? "" : pre.passed ? "ok" : "bad"}`, title: preTitle }, preText)),
      pod.recovery ? el("div", { class: "pod-line recovery" }, `recovering: ${pod.recovery}`) : null,
      el("div", { class: "pod-line muted" },
        pod.current_job
          ? el("span", null, "running ", jobLink(pod.current_job))
          : el("span", null, "idle"),
        el("span", { title: pod.last_seen_at }, `seen ${fmtAgo(pod.last_seen_at)}`)));
  }));
}

export function renderRunning(running) {
  const box = $("running");
  if (!running || running.length === 0) {
    box.replaceChildren(el("p", { class: "empty" }, "Nothing is running."));
    return;
  }
  const head = el("thead", null, el("tr", null,
    el("th", null, "Experiment"), el("th", null, "State"), el("th", null, "Pod"),
    el("th", { class: "num" }, "Attempt"), el("th", { class: "bar-col" }, "Progress"),
    el("th", { class: "num" }, "Step"), el("th", { class: "num" }, "Steps/s"), el("th", { class: "num" }, "Left")));
  const body = el("tbody", null, ...running.map((r) => {
    const rate = r.steps_per_s;
    let remaining = null;
    if (rate && rate > 0 && r.total_steps && r.step !== null && r.step !== undefined) {
      remaining = ((r.total_steps - r.step) / rate) * 1000;
    }
    return el("tr", { class: "run", "data-job-id": r.job_id, "data-state": r.state, tabindex: 0 },
      el("td", { class: "exp" }, r.experiment),
      el("td", null, badge(r.state)),
      el("td", null, r.pod || "–"),
      el("td", { class: "num" }, String(r.attempt)),
      el("td", { class: "bar-col" }, progressBar(r.step, r.total_steps)),
      el("td", { class: "num mono" }, stepText(r.step, r.total_steps)),
      el("td", { class: "num mono" }, rate ? fmtNum(rate) : "–"),
      el("td", { class: "num muted" }, remaining !== null ? fmtDuration(remaining) : "–"));
  }));
  box.replaceChildren(el("div", { class: "table-wrap" }, el("table", { class: "grid running-table", id: "running-table" }, head, body)));
}
