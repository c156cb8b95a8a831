// Building the page: elements from data, through textContent and setAttribute only (never
// innerHTML), and the few small pieces several parts of the page share.

import { fmtTime } from "./format.js";

export const $ = (id) => document.getElementById(id);

/** Creates an element; string/number children become text nodes. */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      // Through the CSSOM: the page's Content-Security-Policy refuses style attributes.
      else if (key === "style") node.style.cssText = String(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function badge(state, kind = "state") {
  return el("span", { class: `badge ${kind}-${state || "none"}`, "data-badge": state || "" }, state || "—");
}

export function timeCell(iso) {
  return el("time", { datetime: iso || null, title: iso || null }, fmtTime(iso));
}

export function progressBar(step, total) {
  const known = Boolean(total && total > 0);
  const pct = known ? Math.max(0, Math.min(100, (100 * (step || 0)) / total)) : 0;
  const bar = el("div", {
    class: known ? "progress" : "progress unknown",
    role: "progressbar",
    "aria-valuemin": 0,
    "aria-valuemax": 100,
    "aria-valuenow": known ? pct.toFixed(1) : null,
    title: known ? `${pct.toFixed(1)} %` : "total steps not known yet",
  }, el("div", { class: "fill", style: known ? `width:${pct.toFixed(2)}%` : null }));
  return bar;
}
