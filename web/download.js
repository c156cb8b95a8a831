// Downloads of the server's files (a study's results.csv, a run's metrics.csv). Without a
// token the link is a plain one and the browser saves the file itself. With one, a link
// cannot send the Authorization header, so a click fetches the file with it and saves it
// through a Blob's object URL (the browser holds the file in memory until it is saved).

import { API, httpError, token, withToken } from "./api.js";

/** Makes `a` download `path` (under /api/v1) as `filename`, with your token when you gave one. */
export function setDownload(a, path, filename) {
  a.href = API + path;
  a.download = filename;
  a.hidden = false;
  if (a.dataset.wired) return;
  a.dataset.wired = "true";
  a.addEventListener("click", (ev) => {
    if (!token()) return;
    ev.preventDefault();
    a.removeAttribute("data-error");
    saveWithToken(a.href, a.download).catch((e) => {
      a.dataset.error = e.message;
      a.title = `Download failed: ${e.message}`;
    });
  });
}

async function saveWithToken(url, filename) {
  const headers = withToken({});
  const resp = await fetch(url, { headers, cache: "no-store" });
  if (!resp.ok) throw await httpError(resp, headers);
  const blob = await resp.blob();
  const objectUrl = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = objectUrl;
  a.download = filename;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(objectUrl), 60_000);
}
