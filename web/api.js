// Talking to the server: one JSON call with a timeout, the error a failed call carries, and
// the admin token that state-changing calls send (asked for on a 401 or 403, kept for this
// tab only).

import { $ } from "./dom.js";

export const API = "/api/v1";
const FETCH_TIMEOUT_MS = 15000;
const TOKEN_KEY = "podq-admin-token";

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The error a failed response stands for: the server's own message when it sent one. */
export async function httpError(resp) {
  let message = `HTTP ${resp.status}`;
  try {
    const err = await resp.json();
    if (err && err.error && err.error.message) message = err.error.message;
  } catch (_) { /* not JSON */ }
  return new HttpError(resp.status, message);
}

/** One API call. Calls that change something carry the admin token when one was given. */
async function api(path, { method = "GET", body, timeoutMs = FETCH_TIMEOUT_MS } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
  }
  try {
    const resp = await fetch(API + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      signal: ctl.signal,
    });
    if (!resp.ok) throw await httpError(resp);
    return await resp.json();
  } finally {
    clearTimeout(timer);
  }
}

export const getJSON = (path) => api(path);

/** A state-changing call; a 401/403 asks for the admin token (kept for this tab only). */
export async function adminCall(method, path, body) {
  try {
    return await api(path, { method, body: body === undefined ? {} : body });
  } catch (e) {
    if (e instanceof HttpError && (e.status === 401 || e.status === 403)) askForToken(e.message);
    throw e;
  }
}

function askForToken(reason) {
  const form = $("token-form");
  form.hidden = false;
  form.title = reason || "";
  $("token-input").focus();
}

/** Keeps the admin token the form was given, for this tab only. */
export function saveToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}
