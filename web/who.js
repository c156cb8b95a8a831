// Who you are: the caller the server takes this tab for (GET /api/v1/whoami), shown in the
// top bar, and what that caller may do, so the page disables the actions your role cannot
// take and says why. Which actions a job offers you is the job's own (its `actions`, sent
// for whoever reads it: panel.js). The server decides in the end: a call it refuses says why.

import { HttpError, askForToken, getJSON, token } from "./api.js";
import { $ } from "./dom.js";

const EVERYTHING = ["read", "submit", "act_on_own_jobs", "act_on_any_job", "manage"];

/** Until the server says otherwise, the page offers what it always did. */
export const me = {
  known: false,
  name: "anonymous",
  role: "admin",
  may: new Set(EVERYTHING),
  tokensRequired: false,
  readsNeedToken: false,
  /** The suite's classes, each saying whether you may put a job in it. */
  classes: [],
};

/** Asks the server who this tab is; true when it answered. */
export async function loadWho() {
  let who;
  try {
    who = await getJSON("/whoami");
  } catch (e) {
    // A 401 (a token the server does not know) was forgotten and asked for by api.js; the
    // page asks again when a token is given.
    if (e instanceof HttpError) return false;
    throw e;
  }
  Object.assign(me, {
    known: true,
    name: who.name,
    role: who.role,
    may: new Set(who.may || []),
    tokensRequired: Boolean(who.tokens_required),
    readsNeedToken: Boolean(who.reads_need_token),
    classes: who.classes || [],
  });
  renderWho();
  if (me.readsNeedToken && !token()) askForToken("This server needs a token to read: paste yours.");
  return true;
}

/** `name (role)`, as the page names you. */
export function youAre() {
  return `you are ${me.name} (${me.role})`;
}

function renderWho() {
  const box = $("who");
  // A server without tokens has nobody to tell apart: the page stays as it was.
  box.hidden = !me.tokensRequired;
  box.dataset.role = me.role;
  box.dataset.name = me.name;
  $("who-name").textContent = me.name;
  $("who-role").textContent = me.role;
  $("who-change").textContent = token() ? "Change token" : "Use a token";
  box.title = me.name === "anonymous"
    ? `Without a token you are anonymous, a ${me.role}: give yours to act as yourself.`
    : `The server takes this tab for ${me.name}, a ${me.role}. The token is kept for this tab only.`;
}

/** Why you may not do what needs `manage` (the plan, the grant, schedules, people); null when you may. */
export function whyNotManage() {
  return me.may.has("manage") ? null : "admins only";
}
