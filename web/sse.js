// Server-sent events read through fetch rather than EventSource, which cannot send the
// Authorization header a server that wants a token for reads asks for. One connection per
// call; whoever opened it decides whether and when to open another.

import { HttpError, httpError, withToken } from "./api.js";

/**
 * Opens `url`'s event stream from after `lastEventId`. Calls `onOpen()` once the server
 * answered 200, `onMessage(type, data, id)` for each event, and `onEnd(error)` once the
 * stream ended (error null: the server closed it) unless `close()` ended it.
 */
export function openEventStream(url, { lastEventId, onOpen, onMessage, onEnd }) {
  const ctl = new AbortController();
  (async () => {
    let error = null;
    try {
      const headers = withToken({ Accept: "text/event-stream" });
      if (lastEventId) headers["Last-Event-ID"] = lastEventId;
      const resp = await fetch(url, { headers, cache: "no-store", signal: ctl.signal });
      if (!resp.ok) throw await httpError(resp, headers);
      onOpen();
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      const event = { type: "", data: [], id: null };
      let rest = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done || ctl.signal.aborted) break;
        rest += value;
        const lines = rest.split("\n");
        rest = lines.pop();
        for (const raw of lines) takeLine(raw.replace(/\r$/, ""), event, onMessage);
      }
    } catch (e) {
      error = e instanceof HttpError ? e : new Error(String(e && e.message ? e.message : e));
    }
    if (!ctl.signal.aborted) onEnd(error);
  })();
  return { close: () => ctl.abort() };
}

/** One line of the stream (the format of the HTML standard's server-sent events). */
function takeLine(line, event, onMessage) {
  if (line === "") {
    if (event.data.length) onMessage(event.type || "message", event.data.join("\n"), event.id);
    event.type = "";
    event.data = [];
    return;
  }
  if (line.startsWith(":")) return; // a comment: the server's keep-alive
  const colon = line.indexOf(":");
  const field = colon < 0 ? line : line.slice(0, colon);
  const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
  if (field === "event") event.type = value;
  else if (field === "data") event.data.push(value);
  else if (field === "id") event.id = value;
}
