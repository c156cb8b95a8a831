// Talking to the server: one JSON call with a timeout, the error a failed call carries, and
// your token. Once given, the token goes with every call (reads too: a server that listens
// beyond loopback wants one for them) and is kept for this tab only. A 401 asks for it, once;
// a token the server no longer knows is forgotten. Whoever needs to know listens for the
// window's "podq-token" event.

import { $ } from "./dom.js";

export const API = "/api/v1";
const FETCH_TIMEOUT_MS = 15000;
const TOKEN_KEY = "podq-token";

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The token this tab was given, or null. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** `headers` with your token's Authorization header, when you gave one. */
export function withToken(headers = {}) {
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  return headers;
}

/**
 * The error a failed response stands for: the server's own message when it sent one. A 401
 * to a call that carried `sent` (the headers it was sent with) forgets that token, which the
 * server does not know (any more), and asks for one.
 */
export async function httpError(resp, sent) {
  let message = `HTTP ${resp.status}`;
  try {
    const err = await resp.json();
    if (err && err.error && err.error.message) message = err.error.message;
  } catch (_) { /* not JSON */ }
  if (resp.status === 401) tokenRefused(sent, message);
  return new HttpError(resp.status, message);
}

async function api(path, { method = "GET", body, timeoutMs = FETCH_TIMEOUT_MS } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  const headers = withToken({ Accept: "application/json" });
  if (body !== undefined) headers["Content-Type"] = "application/json";
  try {
    const resp = await fetch(API + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      signal: ctl.signal,
    });
    if (!resp.ok) throw await httpError(resp, headers);
    return await resp.json();
  } finally {
    clearTimeout(timer);
  }
}

export const getJSON = (path) => api(path);

/** A call that changes something. A 403 is the caller's role or ownership: its message says. */
export function change(method, path, body) {
  return api(path, { method, body: body === undefined ? {} : body });
}

function notify() {
  window.dispatchEvent(new Event("podq-token"));
}

let asked = false;

function tokenRefused(sent, message) {
  const refused = sent && sent.Authorization;
  if (refused && refused === `Bearer ${token()}`) {
    sessionStorage.removeItem(TOKEN_KEY);
    asked = false;
    notify();
  }
  // A call sent before a token was given does not ask again for the one just given.
  if (!token()) askForToken(message);
}

/**
 * Opens the top bar's token form, saying why. Without `always`, only the first time: a page
 * that keeps reading does not keep asking once you closed the form.
 */
export function askForToken(reason, always = false) {
  if (asked && !always) return;
  asked = true;
  const form = $("token-form");
  form.hidden = false;
  $("token-why").textContent = reason || "";
  $("token-forget").hidden = !token();
  $("token-input").focus();
}

/** Keeps your token for this tab only, and tells the page. */
export function saveToken(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
  asked = false;
  notify();
}

/** Forgets your token: the page is anonymous again. */
export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  notify();
}
