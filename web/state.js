// The page's state: what the URL's hash says (view, group, job, filters, metric, x axis,
// smoothing) and the data the page shows, in one object, `ui`.

import { $, el } from "./dom.js";

export const ui = {
  // from the URL
  stateFilter: "",
  groupFilter: "",
  text: "",
  selected: null, // job id whose detail panel is open
  study: null, // group whose study view is open
  metric: "",
  xAxis: "step",
  smooth: 0,
  // data
  panelJob: null, // job id the panel's content belongs to
  jobs: [],
  jobsById: new Map(),
  listTotal: 0,
  groups: [],
  groupNames: "",
  status: null,
  plan: null,
  // the study view's data
  studyData: null, // GET /groups/{name}/study
  runs: new Map(), // run id -> { detail, names: Set, series: Map(metric -> points), fetching }
};

// The hash: #study=<group>&metric=<name>&x=step|hours&smooth=0.6&job=<id>&state=&group=&q=
// Opening a view or a job adds a history entry (back returns); changing a filter, the metric,
// the x axis or the smoothing replaces the current one (reload and links keep it).

export function stateFromHash() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const smooth = Number(params.get("smooth"));
  return {
    stateFilter: params.get("state") || "",
    groupFilter: params.get("group") || "",
    text: params.get("q") || "",
    selected: params.get("job") || null,
    study: params.get("study") || null,
    metric: params.get("metric") || "",
    xAxis: params.get("x") === "hours" ? "hours" : "step",
    smooth: Number.isFinite(smooth) ? Math.max(0, Math.min(0.99, smooth)) : 0,
  };
}

export function hashOf(state) {
  const params = new URLSearchParams();
  if (state.study) params.set("study", state.study);
  if (state.study && state.metric) params.set("metric", state.metric);
  if (state.study && state.xAxis !== "step") params.set("x", state.xAxis);
  if (state.study && state.smooth > 0) params.set("smooth", String(state.smooth));
  if (state.stateFilter) params.set("state", state.stateFilter);
  if (state.groupFilter) params.set("group", state.groupFilter);
  if (state.text) params.set("q", state.text);
  if (state.selected) params.set("job", state.selected);
  const hash = params.toString();
  return hash ? `#${hash}` : "";
}

/** Writes ui's state into the URL: a new history entry when `push`, else in place. */
export function writeHash(push = false) {
  const hash = hashOf(ui);
  if (hash === location.hash || (hash === "" && location.hash === "")) return;
  const url = hash || location.pathname + location.search;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

export function syncControls() {
  $("filter-state").value = ui.stateFilter;
  $("filter-text").value = ui.text;
  syncGroupSelect();
  $("study-x").value = ui.xAxis;
  $("study-smooth").value = String(ui.smooth);
  $("study-smooth-value").textContent = ui.smooth.toFixed(2);
}

export function syncGroupSelect() {
  const select = $("filter-group");
  if (ui.groupFilter && ![...select.options].some((o) => o.value === ui.groupFilter)) {
    select.append(el("option", { value: ui.groupFilter }, ui.groupFilter));
  }
  select.value = ui.groupFilter;
}
