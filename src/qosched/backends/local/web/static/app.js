// The qosched dashboard: polls the service's JSON API and draws it as tables and SVG charts.
// No framework, no build step, nothing from other sites. Text from the service is only ever
// set with textContent (never parsed as HTML), so a job name or log line cannot inject markup.
"use strict";

const POLL_MS = 1000; // jobs, status, timeline, usage
const DETAIL_POLL_MS = 2000; // the selected job's detail, speed and log
const LOG_TAIL_LINES = 40;
const TIMELINE_S = 3600; // the Gantt chart's longest span: the service sends only that much
const LOG_TAIL_BYTES = 64 * 1024; // of a job printing one endless line, only its end
const USAGE_POINTS = 300; // seconds of machine use kept in the chart
const FINAL = new Set(["succeeded", "failed", "cancelled", "declined"]);
const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

const csrf = document.querySelector('meta[name="qosched-csrf"]').content;
const state = { selected: null, usage: [], lastCpu: null };

// --- talking to the service ---------------------------------------------------------------------

async function api(method, path, body, headers) {
  const sent = { "X-CSRF-Token": csrf, ...(headers || {}) };
  const response = await fetch(path, {
    method, body, headers: sent, credentials: "same-origin", cache: "no-store",
  });
  if (response.status === 401) {
    setConnection("signed out: open a new login URL (qosched web)", true);
    throw new Error("signed out");
  }
  const type = response.headers.get("Content-Type") || "";
  const data = type.startsWith("application/json") ? await response.json() : await response.text();
  if (!response.ok) {
    const error = new Error(typeof data === "object" ? data.error : String(data));
    error.payload = data;
    throw error;
  }
  return data;
}

function setConnection(text, bad) {
  const element = document.getElementById("connection");
  element.textContent = text;
  element.className = bad ? "bad" : "muted";
}

// --- formatting ---------------------------------------------------------------------------------

function el(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (key === "class") element.className = value;
    else if (key.startsWith("data-")) element.setAttribute(key, value);
    else element[key] = value;
  }
  for (const child of children) {
    element.append(child instanceof Node ? child : String(child ?? ""));
  }
  return element;
}

function svg(tag, attributes, text) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, value);
  if (text !== undefined) element.textContent = text;
  return element;
}

function duration(seconds) {
  seconds = Math.round(Math.abs(seconds));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m${String(seconds % 60).padStart(2, "0")}s`;
  return `${Math.floor(seconds / 3600)}h${String(Math.floor(seconds / 60) % 60).padStart(2, "0")}m`;
}

function relative(at, now) {
  return at >= now ? `in ${duration(at - now)}` : `${duration(now - at)} ago`;
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], { hour12: false });
}

function cores(list) {
  if (!list || list.length === 0) return "-";
  const sorted = [...list].sort((a, b) => a - b);
  const parts = [];
  let start = 0;
  for (let i = 1; i <= sorted.length; i++) {
    if (i === sorted.length || sorted[i] !== sorted[i - 1] + 1) {
      const first = sorted[start], last = sorted[i - 1];
      parts.push(first === last ? `${first}` : `${first}-${last}`);
      start = i;
    }
  }
  return parts.join(",");
}

// The same words as `qosched status`: met or missed once finished, else what the prediction says.
function outlook(job) {
  const deadline = job.deadline_at;
  if (job.state === "succeeded" && job.finished_at != null) {
    const late = job.finished_at - deadline;
    return late <= 0 ? ["met", "good"] : [`missed by ${duration(late)}`, "bad"];
  }
  if (job.state === "failed" || job.state === "declined") return [job.state, "bad"];
  if (job.state === "cancelled") return ["-", "muted"];
  if (job.state === "profiling") return ["measuring its speed", "muted"];
  const predicted = job.predicted_finish_at;
  if (predicted == null) return ["", ""];
  const high = job.predicted_finish_band ? job.predicted_finish_band[1] : predicted;
  if (predicted > deadline) return ["will miss", "bad"];
  if (high > deadline) return ["at risk", "warn"];
  return ["on track", "good"];
}

function jobColor(jobId) {
  const number = parseInt(jobId.replace(/\D/g, ""), 10) || 0;
  return PALETTE[number % PALETTE.length];
}

// --- jobs table ---------------------------------------------------------------------------------

function renderJobs(jobs, now) {
  const body = document.querySelector("#jobs tbody");
  document.getElementById("no-jobs").hidden = jobs.length > 0;
  const rows = jobs.map((job) => {
    const done = job.iterations ? job.iterations_done / job.iterations : 0;
    const bar = el("div", { class: "bar" }, el("div", { class: "fill" }));
    bar.firstChild.style.width = `${Math.round(done * 100)}%`;
    let predicted = "-";
    if (job.finished_at != null) predicted = `finished ${relative(job.finished_at, now)}`;
    else if (job.predicted_finish_at != null) {
      predicted = relative(job.predicted_finish_at, now);
      if (job.predicted_finish_band) {
        const [low, high] = job.predicted_finish_band;
        predicted += ` (${duration(low - now)}–${duration(high - now)})`;
      }
    }
    let deadline = relative(job.deadline_at, now);
    if (job.finished_at == null && job.deadline_at < now) deadline = `${duration(now - job.deadline_at)} late`;
    const [words, tone] = outlook(job);
    const promise = job.guaranteed ? "guaranteed" : job.best_effort ? "best effort" : "-";
    const action = FINAL.has(job.state) ? "" : el("button", {
      class: "cancel", "data-job": job.id, type: "button",
      onclick: (event) => { event.stopPropagation(); cancel(job.id); },
    }, "Cancel");
    const row = el("tr", { "data-job": job.id, class: job.id === state.selected ? "selected" : "" },
      el("td", {}, job.id), el("td", {}, job.name),
      el("td", { class: `state ${job.state}` }, job.state),
      el("td", { class: "progress" }, bar, el("span", { class: "small" },
        ` ${job.iterations_done}/${job.iterations}`)),
      el("td", { class: "cores" }, cores(job.cpus)), el("td", {}, cores(job.gpus || [])),
      el("td", {}, deadline), el("td", {}, predicted),
      el("td", { class: `outlook ${tone}`, title: job.error || "" }, words),
      el("td", {}, promise), el("td", {}, action));
    row.addEventListener("click", () => select(job.id));
    return row;
  });
  body.replaceChildren(...rows);
}

async function cancel(jobId) {
  try {
    await api("DELETE", `/jobs/${encodeURIComponent(jobId)}`);
  } catch (error) {
    alert(`cannot cancel ${jobId}: ${error.message}`);
  }
  refresh();
}

// --- timeline (Gantt) ---------------------------------------------------------------------------

function renderTimeline(data) {
  const host = document.getElementById("timeline");
  const rows = [...data.cpus.map((c) => ["cpu", c]), ...data.gpus.map((g) => ["gpu", g])];
  const width = Math.max(host.clientWidth || 800, 400), left = 60, right = 10, rowHeight = 22;
  const height = rows.length * rowHeight + 30;
  // From the first allocation on (at least the last 20 s, at most TIMELINE_S).
  const end = data.now;
  const first = data.segments.reduce((t, s) => Math.min(t, s.from), end - 20);
  const start = Math.max(end - TIMELINE_S, first);
  const x = (t) => left + ((t - start) / Math.max(end - start, 1e-9)) * (width - left - right);
  const chart = svg("svg", { width, height, role: "img", "aria-label": "allocations over time" });
  rows.forEach(([kind, id], index) => {
    chart.append(svg("text", { x: 4, y: index * rowHeight + 15, class: "axis" }, `${kind} ${id}`));
    chart.append(svg("line", { x1: left, x2: width - right, y1: (index + 1) * rowHeight,
      y2: (index + 1) * rowHeight, class: "grid" }));
  });
  const rowOf = new Map(rows.map(([kind, id], index) => [`${kind}${id}`, index]));
  const names = new Map(data.jobs.map((j) => [j.id, j.name]));
  for (const segment of data.segments) {
    if ((segment.until ?? end) < start) continue;
    const x0 = x(Math.max(segment.from, start)), x1 = x(segment.until ?? end);
    const held = [...segment.cpus.map((c) => `cpu${c}`), ...(segment.gpus || []).map((g) => `gpu${g}`)];
    for (const key of held) {
      const index = rowOf.get(key);
      if (index === undefined) continue;
      const bar = svg("rect", { x: x0, y: index * rowHeight + 3, width: Math.max(x1 - x0, 1),
        height: rowHeight - 6, fill: jobColor(segment.job), class: "segment",
        "data-job": segment.job });
      bar.append(svg("title", {}, `${segment.job} (${names.get(segment.job)}): cores ` +
        `${cores(segment.cpus)} from ${clock(segment.from)}` +
        (segment.until ? ` until ${clock(segment.until)}` : ", held now")));
      bar.addEventListener("click", () => select(segment.job));
      chart.append(bar);
      if (x1 - x0 > 40) {
        chart.append(svg("text", { x: x0 + 3, y: index * rowHeight + 15, class: "label" },
          segment.job));
      }
    }
  }
  const symbols = { resize: "▲", preempt: "✕", restart: "↻", start: "", succeeded: "●",
    failed: "●", cancelled: "●", declined: "" };
  for (const mark of data.marks) {
    const symbol = symbols[mark.kind];
    if (!symbol || mark.t < start) continue;
    const text = svg("text", { x: x(mark.t), y: rows.length * rowHeight + 14,
      class: `mark ${mark.kind}`, "text-anchor": "middle", fill: jobColor(mark.job) }, symbol);
    text.append(svg("title", {}, `${clock(mark.t)} ${mark.job}: ${mark.text}`));
    chart.append(text);
    chart.append(svg("line", { x1: x(mark.t), x2: x(mark.t), y1: 0, y2: rows.length * rowHeight,
      class: "markline", stroke: jobColor(mark.job) }));
  }
  chart.append(svg("text", { x: left, y: height - 2, class: "axis" }, clock(start)));
  chart.append(svg("text", { x: width - right, y: height - 2, class: "axis", "text-anchor": "end" },
    `${clock(end)} (now)`));
  host.replaceChildren(chart);
}

// --- machine use ----------------------------------------------------------------------------------

function recordUsage(usage, status) {
  const allocated = Object.values(usage.jobs).reduce((sum, job) => sum + job.cpus, 0);
  const cpu = Object.fromEntries(Object.entries(usage.jobs).map(([id, job]) => [id, job.cpu_s]));
  let used = null;
  if (state.lastCpu && usage.t > state.lastCpu.t) {
    // CPU seconds per second of the jobs alive at both samples: cores' worth actually busy.
    let spent = 0;
    for (const [id, seconds] of Object.entries(cpu)) {
      if (id in state.lastCpu.cpu) spent += Math.max(seconds - state.lastCpu.cpu[id], 0);
    }
    used = spent / (usage.t - state.lastCpu.t);
  }
  state.lastCpu = { t: usage.t, cpu };
  state.usage.push({ t: usage.t, allocated, used });
  if (state.usage.length > USAGE_POINTS) state.usage.shift();
  const gpus = status.capacity.gpus.length;
  document.getElementById("use-summary").textContent =
    `cores allocated ${allocated}/${usage.cpus}` +
    (used == null ? "" : `, CPU in use ${used.toFixed(1)} cores`) +
    (gpus ? `, GPUs ${gpus}` : "") +
    `, ${status.running} running, ${status.queued} waiting`;
  renderUsage(usage.cpus);
}

function renderUsage(capacity) {
  const host = document.getElementById("usage");
  const width = Math.max(host.clientWidth || 800, 400), height = 120, left = 40, bottom = 18;
  const points = state.usage;
  const chart = svg("svg", { width, height, role: "img", "aria-label": "machine use" });
  if (points.length > 1) {
    const t0 = points[0].t, t1 = points[points.length - 1].t;
    const x = (t) => left + ((t - t0) / Math.max(t1 - t0, 1e-9)) * (width - left - 10);
    const y = (v) => (height - bottom) - (v / Math.max(capacity, 1)) * (height - bottom - 6);
    const line = (key) => points.filter((p) => p[key] != null)
      .map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { points: line("allocated"), class: "allocated" }));
    chart.append(svg("polyline", { points: line("used"), class: "used" }));
    chart.append(svg("text", { x: 4, y: y(capacity) + 10, class: "axis" }, `${capacity}`));
    chart.append(svg("text", { x: 4, y: y(0), class: "axis" }, "0"));
    chart.append(svg("text", { x: left, y: height - 2, class: "axis" },
      `allocated (solid) and used (dashed) cores, last ${duration(t1 - t0)}`));
  }
  host.replaceChildren(chart);
}

// --- one job ------------------------------------------------------------------------------------

const EVENT_WORDS = {
  state: (d) => `${d.from} -> ${d.to}` + (d.cpus ? ` on cores ${cores(d.cpus)}` : "") +
    (d.error ? `: ${d.error}` : ""),
  allocation: (d) => `re-sized from cores ${cores(d.from)} to ${cores(d.to)}`,
  launched: (d) => `runner started (pid ${d.pid}, attempt ${d.attempt}) on cores ${cores(d.cores)}`,
  admitted: (d) => `by ${d.policy}: ` +
    (d.guaranteed ? "deadline guaranteed" : "not guaranteed (best effort)"),
  stopped: (d) => String(d.why ?? ""),
  "re-adopted": (d) => `runner (pid ${d.pid}) re-adopted by a restarted service`,
};

function eventText(event) {
  const words = EVENT_WORDS[event.kind];
  if (words) return words(event.detail || {});
  return Object.entries(event.detail || {}).map(([k, v]) => `${k} ${JSON.stringify(v)}`).join(", ");
}

function select(jobId) {
  state.selected = jobId;
  document.getElementById("detail-section").hidden = false;
  for (const row of document.querySelectorAll("#jobs tbody tr")) {
    row.classList.toggle("selected", row.dataset.job === jobId);
  }
  refreshDetail();
}

async function refreshDetail() {
  const jobId = state.selected;
  if (!jobId) return;
  const path = `/jobs/${encodeURIComponent(jobId)}`;
  const [detail, speed, log] = await Promise.all([
    api("GET", `${path}/detail`), api("GET", `${path}/speed`),
    api("GET", `${path}/logs?tail=${LOG_TAIL_LINES}&limit=${LOG_TAIL_BYTES}`),
  ]);
  if (state.selected !== jobId) return;
  document.getElementById("detail-title").textContent =
    `${detail.id} (${detail.name}): ${detail.state}` +
    (detail.slack_s == null ? "" : `, slack ${detail.slack_s < 0 ? "-" : ""}${duration(detail.slack_s)}`) +
    (detail.speed_source ? `, speed ${detail.speed_source}` : "");
  document.querySelector("#allocations tbody").replaceChildren(...detail.allocations.map((a) =>
    el("tr", {}, el("td", {}, clock(a.from)), el("td", {}, a.until ? clock(a.until) : "now"),
      el("td", {}, cores(a.cpus)))));
  document.querySelector("#events tbody").replaceChildren(...detail.events.map((e) =>
    el("tr", {}, el("td", {}, clock(e.t)), el("td", {}, e.kind), el("td", {}, eventText(e)))));
  const logElement = document.getElementById("log");
  const atBottom = logElement.scrollTop + logElement.clientHeight >= logElement.scrollHeight - 4;
  logElement.textContent = log || "(no output yet)";
  if (atBottom) logElement.scrollTop = logElement.scrollHeight; // follow the tail
  renderSpeed(speed);
}

function renderSpeed(speed) {
  const host = document.getElementById("speed");
  const width = 420, height = 220, left = 50, bottom = 30, top = 10, right = 10;
  const chart = svg("svg", { width, height, role: "img", "aria-label": "speed against cores" });
  const counts = [...speed.predicted.map((p) => p.cpus), ...speed.measured.map((m) => m.cpus)];
  if (counts.length === 0) {
    chart.append(svg("text", { x: left, y: height / 2, class: "axis" },
      "nothing learned yet: no progress measured"));
    host.replaceChildren(chart);
    return;
  }
  const maxCpus = Math.max(...counts, 1);
  const maxRate = Math.max(...speed.predicted.map((p) => p.high), ...speed.measured.map((m) => m.rate));
  const x = (c) => left + (maxCpus === 1 ? 0.5 : (c - 1) / (maxCpus - 1)) * (width - left - right);
  const y = (r) => (height - bottom) - (r / (maxRate * 1.1 || 1)) * (height - bottom - top);
  if (speed.predicted.length) {
    const upper = speed.predicted.map((p) => `${x(p.cpus)},${y(p.high)}`);
    const lower = [...speed.predicted].reverse().map((p) => `${x(p.cpus)},${y(p.low)}`);
    chart.append(svg("polygon", { points: [...upper, ...lower].join(" "), class: "band" }));
    chart.append(svg("polyline", { class: "predicted",
      points: speed.predicted.map((p) => `${x(p.cpus)},${y(p.rate)}`).join(" ") }));
  }
  for (const m of speed.measured) {
    const dot = svg("circle", { cx: x(m.cpus), cy: y(m.rate), r: 5, class: "measured" });
    dot.append(svg("title", {}, `${m.rate.toFixed(2)} it/s on ${m.cpus} cores, measured over ` +
      `${duration(m.seconds)}`));
    chart.append(dot);
  }
  for (let c = 1; c <= maxCpus; c++) {
    chart.append(svg("text", { x: x(c), y: height - bottom + 14, class: "axis",
      "text-anchor": "middle" }, c));
  }
  chart.append(svg("text", { x: left + (width - left) / 2, y: height - 2, class: "axis",
    "text-anchor": "middle" }, "cores"));
  chart.append(svg("text", { x: 2, y: top + 4, class: "axis" }, `${(maxRate * 1.1).toPrecision(2)}`));
  chart.append(svg("text", { x: 2, y: height - bottom, class: "axis" }, "0 it/s"));
  host.replaceChildren(chart);
}

// --- submit ---------------------------------------------------------------------------------------

async function submit(event) {
  event.preventDefault();
  const result = document.getElementById("submit-result");
  const errorBox = document.getElementById("submit-error");
  const file = document.getElementById("spec-file").files[0];
  const pasted = document.getElementById("spec-text").value;
  let text = pasted, source = "<pasted>";
  if (file && !pasted.trim()) {
    text = await file.text();
    source = file.name;
  }
  errorBox.hidden = true;
  result.textContent = "submitting…";
  try {
    const job = await api("POST", "/jobs", text, {
      "Content-Type": "application/yaml", "X-Qosched-Source": encodeURIComponent(source),
    });
    result.textContent = `submitted ${job.id} (${job.name}): ${job.state}`;
    select(job.id);
  } catch (error) {
    result.textContent = "";
    errorBox.hidden = false;
    // The same words as the CLI: file:line: field 'name': reason.
    errorBox.textContent = error.message;
    if (error.payload && error.payload.field) errorBox.dataset.field = error.payload.field;
  }
  refresh();
}

// --- the loop -------------------------------------------------------------------------------------

async function refresh() {
  try {
    const [status, jobs, timeline, usage] = await Promise.all([
      api("GET", "/status"), api("GET", "/jobs"), api("GET", `/timeline?window=${TIMELINE_S}`),
      api("GET", "/usage"),
    ]);
    document.getElementById("policy").textContent = `policy ${status.policy}`;
    renderJobs(jobs, timeline.now);
    renderTimeline(timeline);
    recordUsage(usage, status);
    if (status.trouble) {
      // The service cannot read or write what happened: the rows above may be behind.
      setConnection(`the service is in trouble since ${clock(status.trouble_since)}: ` +
        `${status.trouble}; job states may be behind`, true);
    } else {
      setConnection(`updated ${clock(timeline.now)}`, false);
    }
  } catch (error) {
    if (error.message !== "signed out") setConnection(`cannot reach the service: ${error.message}`, true);
  }
}

document.getElementById("submit-form").addEventListener("submit", submit);
document.getElementById("spec-file").addEventListener("change", () => {
  document.getElementById("spec-text").value = "";
});
refresh();
setInterval(refresh, POLL_MS);
setInterval(() => refreshDetail().catch(() => {}), DETAIL_POLL_MS);
