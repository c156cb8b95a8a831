// How values read on the page: numbers, counts, durations, times, dates and steps. Pure
// functions of their arguments; nothing here touches the DOM.

export function fmtNum(v) {
  // A non-finite metric value comes as its marker, "NaN", "Infinity" or "-Infinity".
  if (typeof v === "string") return v;
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString("en-US");
  if (a === 0) return "0";
  if (a < 0.001) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

export function fmtInt(v) {
  return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US");
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  if (ms > 0 && ms < 1000) return "<1s";
  const neg = ms < 0;
  let s = Math.round(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  let out;
  if (d > 0) out = `${d}d ${h}h`;
  else if (h > 0) out = `${h}h ${m}m`;
  else if (m > 0) out = `${m}m ${s}s`;
  else out = `${s}s`;
  return neg ? `-${out}` : out;
}

export function fmtTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const now = new Date();
  const sameDay = d.toDateString() === now.toDateString();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  if (sameDay) return time;
  return `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

export function fmtAgo(iso) {
  if (!iso) return "–";
  const ms = Date.now() - new Date(iso).getTime();
  if (!Number.isFinite(ms)) return String(iso);
  if (ms < 5000) return "just now";
  return `${fmtDuration(ms)} ago`;
}

export function stepText(step, total) {
  if (step === null || step === undefined) return total ? `– / ${fmtInt(total)}` : "–";
  return total ? `${fmtInt(step)} / ${fmtInt(total)}` : fmtInt(step);
}

export function fmtDate(iso, withYear = false) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleDateString([], withYear ? { year: "numeric", month: "short", day: "numeric" } : { month: "short", day: "numeric" });
}

/** The step a checkpoint URI names (its last path segment), or null. */
export function stepOfResume(uri) {
  if (!uri) return null;
  const last = String(uri).replace(/\/+$/, "").split("/").pop();
  return /^\d+$/.test(last) ? Number(last) : null;
}
