// Submitting a group from the page: choose the group, its class and priority, see what a
// dry run says would be created, linked or skipped and when the plan has the group's last run
// end, then send it. The same checks as the CLI's: the server decides, and a class the
// person may not use is not offered.

import { change, getJSON } from "./api.js";
import { $, el } from "./dom.js";
import { fmtTime } from "./format.js";
import { ui } from "./state.js";
import { me, youAre } from "./who.js";

let previewed = null; // the request the shown preview is of

/** The request the form describes now. */
function request() {
  const priority = Number.parseInt($("submit-priority").value, 10);
  return {
    group: $("submit-group").value,
    priority_class: $("submit-class").value || undefined,
    priority: Number.isFinite(priority) ? priority : undefined,
  };
}

/** The form's choices for who you are and the groups there are; disabled, saying why, for a viewer. */
export function syncSubmitForm() {
  const groupSelect = $("submit-group");
  const names = ui.groups.map((g) => g.name);
  if ([...groupSelect.options].map((o) => o.value).join("\n") !== names.join("\n")) {
    const was = groupSelect.value;
    groupSelect.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(was)) groupSelect.value = was;
  }
  const classSelect = $("submit-class");
  const classes = me.classes.map((c) => `${c.name}:${c.allowed}`).join(",");
  if (classSelect.dataset.classes !== classes) {
    classSelect.dataset.classes = classes;
    classSelect.replaceChildren(...me.classes.map((c) => el("option", {
      value: c.name,
      disabled: !c.allowed,
      selected: c.default,
    }, c.allowed ? c.name : `${c.name} (not yours to use)`)));
  }
  const no = me.may.has("submit") ? null : "viewers may not submit";
  for (const id of ["submit-group", "submit-class", "submit-priority", "submit-preview", "submit-send"]) {
    $(id).disabled = Boolean(no);
  }
  $("submit-preview").title = no ? `${no}; ${youAre()}` : "";
  $("submit-why").textContent = no || "";
  $("submit-why").hidden = !no;
}

/** Any change to the form makes the shown preview stale: it must be previewed again. */
export function formChanged() {
  previewed = null;
  $("submit-send").hidden = true;
  $("submit-preview-text").textContent = "";
}

/** Shows what the server would do with the form's request, and where the plan puts the group. */
export async function previewSubmit() {
  const req = request();
  const status = $("submit-preview-text");
  status.textContent = "asking…";
  try {
    const [answer, plan] = await Promise.all([
      change("POST", "/jobs", { ...req, dry_run: true }),
      getJSON("/plan").catch(() => null),
    ]);
    const group = plan && (plan.groups || []).find((g) => g.name === req.group);
    const parts = [`would create ${answer.created.length}, link ${answer.linked.length}, skip ${answer.skipped.length}`];
    if (group && group.end_current) {
      const fits = group.fits_current === true ? ", within the deadline" : group.fits_current === false ? ", after the deadline" : "";
      parts.push(`the plan has its last run end ${fmtTime(group.end_current)}${fits}`);
    }
    status.textContent = `${req.group}: ${parts.join("; ")}.`;
    previewed = JSON.stringify(req);
    $("submit-send").hidden = answer.created.length + answer.linked.length === 0;
  } catch (e) {
    status.textContent = `Not previewed: ${e.message}`;
  }
}

/** Sends the previewed request; `submitted()` brings the page up to date after. */
export async function sendSubmit(submitted) {
  const req = request();
  if (previewed !== JSON.stringify(req)) {
    formChanged();
    return;
  }
  const status = $("submit-preview-text");
  status.textContent = "submitting…";
  try {
    const answer = await change("POST", "/jobs", req);
    status.textContent = `Submitted ${req.group}: ${answer.created.length} created, ${answer.linked.length} linked, ${answer.skipped.length} skipped.`;
    previewed = null;
    $("submit-send").hidden = true;
    await submitted();
  } catch (e) {
    status.textContent = `Not submitted: ${e.message}`;
  }
}
