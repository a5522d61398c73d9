// The qosched dashboard: polls the service's JSON API and draws it as tables and SVG charts.
// No framework, no build step, nothing from other sites. Text from the service is only ever
// set with textContent (never parsed as HTML), so a job name or log line cannot inject markup.
"use strict";

const POLL_MS = 1000; // jobs, status, timeline, usage
const DETAIL_POLL_MS = 2000; // the selected job's detail, speed and log
const LOG_TAIL_LINES = 200;
const LOG_TAIL_BYTES = 64 * 1024; // of a job printing one endless line, only its end
const PAGE_ROWS = 50; // jobs per page of the table
const WINDOW_S = 3600; // the timeline's window unless the URL says otherwise: the last hour
const MIN_WINDOW_S = 60, MAX_WINDOW_S = 7 * 86400;
const FIT_MIN_S = 300; // a window fitted to a short history shows at least 5 minutes
const USAGE_WINDOW_MAX_S = 86400; // the service keeps a day of machine use
const FINAL = new Set(["succeeded", "failed", "cancelled", "declined"]);
const SVG = "http://www.w3.org/2000/svg";
// Tick steps for the time axes, in seconds: the smallest that leaves room for each label.
const TICK_STEPS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
  86400];

const csrf = document.querySelector('meta[name="qosched-csrf"]').content;
// What the page shows is all in its URL's fragment (#job=j-000004&state=running&sort=name...),
// so every view, a job's own included, has an address to bookmark or send.
// `span`: the seconds the timeline and machine use show now: the chosen window, or while none
// is chosen, the last hour cut to the history there is (a service started a minute ago shows
// that minute, not a bar squeezed to the right edge of an hour).
const state = { selected: null, lastCpu: null, firstDrawn: false, view: readView(), span: WINDOW_S };

function readView() {
  const hash = new URLSearchParams(location.hash.slice(1));
  const span = parseInt(hash.get("window"), 10);
  return {
    job: hash.get("job") || null,
    state: hash.get("state") || "",
    q: hash.get("q") || "",
    sort: hash.get("sort") || "",
    order: hash.get("order") === "desc" ? "desc" : "asc",
    page: Math.max(parseInt(hash.get("page"), 10) || 1, 1),
    window: span >= MIN_WINDOW_S && span <= MAX_WINDOW_S ? span : WINDOW_S,
    chosen: span >= MIN_WINDOW_S && span <= MAX_WINDOW_S,
  };
}

function writeView() {
  const view = state.view, hash = new URLSearchParams();
  if (view.job) hash.set("job", view.job);
  if (view.state) hash.set("state", view.state);
  if (view.q) hash.set("q", view.q);
  if (view.sort) hash.set("sort", view.sort);
  if (view.sort && view.order === "desc") hash.set("order", "desc");
  if (view.page > 1) hash.set("page", view.page);
  if (view.chosen) hash.set("window", view.window);
  const text = hash.toString();
  // replaceState: no history entry (and no hashchange) per keystroke in the filter.
  history.replaceState(null, "", text ? `#${text}` : location.pathname);
}

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

// Made once: toLocaleTimeString builds a formatter per call, which hundreds of bars and marks
// each second made the slowest part of drawing the page.
const CLOCK = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit", second: "2-digit",
  hourCycle: "h23" });
const TICK_MINUTES = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
const TICK_DAY = new Intl.DateTimeFormat([], { month: "short", day: "numeric" });

function clock(t) {
  return CLOCK.format(new Date(t * 1000));
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

// Hues a golden angle apart: jobs next to each other in submission order never look alike.
function jobColor(jobId) {
  const number = parseInt(jobId.replace(/\D/g, ""), 10) || 0;
  return `hsl(${Math.round((number * 137.508) % 360)}, 62%, 40%)`;
}

function held(job) {
  const parts = [];
  if (job.cpus.length) parts.push(`${job.cpus.length} ${job.cpus.length === 1 ? "core" : "cores"}`);
  const gpus = job.gpus || [];
  if (gpus.length) parts.push(`${gpus.length} ${gpus.length === 1 ? "GPU" : "GPUs"}`);
  return parts.join(", ") || "-";
}

// --- jobs table ---------------------------------------------------------------------------------

function jobsQuery() {
  const view = state.view, query = new URLSearchParams();
  if (view.state) query.set("state", view.state);
  if (view.q.trim()) query.set("q", view.q.trim());
  if (view.sort) query.set("sort", view.sort);
  query.set("order", view.order);
  query.set("offset", (view.page - 1) * PAGE_ROWS);
  query.set("limit", PAGE_ROWS);
  return query.toString();
}

function renderJobs(table, now) {
  const { jobs, matched, total, offset, states } = table;
  const body = document.querySelector("#jobs tbody");
  document.getElementById("no-jobs").hidden = total > 0;
  const last = Math.max(Math.ceil(matched / PAGE_ROWS), 1);
  if (state.view.page > last) { // the filter left fewer pages: show the last one next time
    state.view.page = last;
    writeView();
  }
  document.getElementById("page-info").textContent = matched === 0
    ? (total ? `none of ${total} match` : "")
    : `${offset + 1}–${offset + jobs.length} of ${matched}` + (matched < total ? ` (${total} in all)` : "");
  document.getElementById("page-previous").disabled = offset === 0;
  document.getElementById("page-next").disabled = offset + jobs.length >= matched;
  for (const option of document.querySelectorAll("#state-filter option")) {
    const value = option.value, label = value || "all";
    const count = value === "" ? total : value === "active"
      ? ["queued", "profiling", "running", "preempted"].reduce((n, s) => n + states[s], 0)
      : value === "finished" ? [...FINAL].reduce((n, s) => n + states[s], 0) : states[value];
    option.textContent = `${label} (${count})`;
  }
  for (const th of document.querySelectorAll("#jobs th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === state.view.sort);
    th.classList.toggle("desc", th.dataset.sort === state.view.sort && state.view.order === "desc");
  }
  const rows = jobs.map((job) => {
    const done = job.iterations ? job.iterations_done / job.iterations : 0;
    const bar = el("div", { class: "bar" }, el("div", { class: "fill" }));
    bar.firstChild.style.width = `${Math.round(done * 100)}%`;
    let finish = "-", band = "";
    if (job.finished_at != null) finish = relative(job.finished_at, now);
    else if (job.predicted_finish_at != null) {
      finish = `≈ ${relative(job.predicted_finish_at, now)}`;
      if (job.predicted_finish_band) {
        const [low, high] = job.predicted_finish_band;
        band = `predicted between ${clock(low)} and ${clock(high)}`;
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
      el("td", { class: "id" }, job.id), el("td", { class: "name", title: job.name }, job.name),
      el("td", { class: `state ${job.state}` }, job.state),
      el("td", { class: "progress" }, bar, el("span", { class: "small" },
        ` ${job.iterations_done}/${job.iterations}`)),
      el("td", { class: "cores", title: `cores ${cores(job.cpus)}` +
        ((job.gpus || []).length ? `, GPUs ${cores(job.gpus)}` : "") }, held(job)),
      el("td", { class: "deadline", title: clock(job.deadline_at) }, deadline),
      el("td", { class: "finish", title: band }, finish),
      el("td", { class: `outlook ${tone}`, title: job.error || "" }, words),
      el("td", { class: "promise" }, promise), el("td", {}, action));
    row.addEventListener("click", () => select(job.id));
    return row;
  });
  body.replaceChildren(...rows);
}

function sortBy(column) {
  const view = state.view;
  if (view.sort === column) view.order = view.order === "asc" ? "desc" : "asc";
  else { view.sort = column; view.order = "asc"; }
  view.page = 1;
  writeView();
  refresh();
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

// Clock-time ticks over [start, end] at least `spacing` px apart on `width` px: at whole
// minutes, hours... of local time.
function timeTicks(start, end, width, spacing) {
  const span = Math.max(end - start, 1);
  const step = TICK_STEPS.find((s) => (span / s) * spacing <= width) || TICK_STEPS.at(-1);
  const offset = new Date(start * 1000).getTimezoneOffset() * 60; // local time = UTC - offset
  const ticks = [];
  for (let t = Math.ceil((start - offset) / step) * step + offset; t <= end; t += step) {
    const date = new Date(t * 1000);
    let label = (step < 60 ? CLOCK : TICK_MINUTES).format(date);
    if (step >= 86400 || (date.getHours() === 0 && date.getMinutes() === 0 && step >= 3600)) {
      label = TICK_DAY.format(date); // midnight: the day
    }
    ticks.push([t, label]);
  }
  return ticks;
}

function drawTicks(chart, x, start, end, width, top, bottom) {
  for (const [t, label] of timeTicks(start, end, width, 90)) {
    chart.append(svg("line", { x1: x(t), x2: x(t), y1: top, y2: bottom, class: "tickline" }));
    chart.append(svg("text", { x: x(t), y: bottom + 13, class: "axis tick", "text-anchor": "middle" },
      label));
  }
}

// The longest of a job's labels that fits `room` px (11 px text, about 6.6 px a character).
function fittingLabel(job, name, room) {
  const number = job.replace(/^j-0*/, "");
  for (const label of [`${job} ${name}`, job, `#${number}`]) {
    if (label.length * 6.6 + 6 <= room) return label;
  }
  return null;
}

function renderTimeline(data) {
  const host = document.getElementById("timeline");
  const rows = [...data.cpus.map((c) => ["cpu", c]), ...data.gpus.map((g) => ["gpu", g])];
  const width = Math.max(host.clientWidth || 800, 400), left = 60, right = 12, rowHeight = 22;
  const marksAt = rows.length * rowHeight + 14;
  const height = marksAt + 24;
  state.span = shownSpan(data);
  const end = data.now, start = end - state.span;
  const x = (t) => left + ((t - start) / Math.max(end - start, 1e-9)) * (width - left - right);
  const chart = svg("svg", { width, height, role: "img", "aria-label": "allocations over time" });
  rows.forEach(([kind, id], index) => {
    chart.append(svg("text", { x: 4, y: index * rowHeight + 15, class: "axis" }, `${kind} ${id}`));
    chart.append(svg("line", { x1: left, x2: width - right, y1: (index + 1) * rowHeight,
      y2: (index + 1) * rowHeight, class: "grid" }));
  });
  drawTicks(chart, x, start, end, width - left - right, 0, marksAt + 6);
  const rowOf = new Map(rows.map(([kind, id], index) => [`${kind}${id}`, index]));
  const names = new Map(data.jobs.map((j) => [j.id, j.name]));
  for (const segment of data.segments) {
    if ((segment.until ?? end) < start) continue;
    const x0 = x(Math.max(segment.from, start)), x1 = x(segment.until ?? end);
    const units = [...segment.cpus.map((c) => `cpu${c}`), ...(segment.gpus || []).map((g) => `gpu${g}`)];
    for (const key of units) {
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
      const label = fittingLabel(segment.job, names.get(segment.job) || "", x1 - x0);
      if (label) {
        chart.append(svg("text", { x: x0 + 3, y: index * rowHeight + 15, class: "label",
          "data-job": segment.job }, label));
      }
    }
  }
  const symbols = { resize: "▲", preempt: "✕", restart: "↻", start: "", succeeded: "●",
    failed: "●", cancelled: "●", declined: "" };
  for (const mark of data.marks) {
    const symbol = symbols[mark.kind];
    if (!symbol || mark.t < start) continue;
    const text = svg("text", { x: x(mark.t), y: marksAt,
      class: `mark ${mark.kind}`, "text-anchor": "middle", fill: jobColor(mark.job) }, symbol);
    text.append(svg("title", {}, `${clock(mark.t)} ${mark.job}: ${mark.text}`));
    chart.append(text);
    chart.append(svg("line", { x1: x(mark.t), x2: x(mark.t), y1: 0, y2: rows.length * rowHeight,
      class: "markline", stroke: jobColor(mark.job) }));
  }
  host.replaceChildren(chart);
  document.getElementById("window-info").textContent =
    `${clock(start)} to ${clock(end)} (now), ${duration(state.span)}` +
    (!state.view.chosen && state.span < state.view.window ? ", all the history there is" : "");
  for (const button of document.querySelectorAll("#zoom button[data-window]")) {
    button.classList.toggle("chosen", Number(button.dataset.window) === state.span);
  }
}

function shownSpan(data) {
  if (state.view.chosen) return state.view.window;
  const first = Math.min(...data.segments.map((s) => s.from), ...data.marks.map((m) => m.t));
  if (!Number.isFinite(first)) return FIT_MIN_S;
  // A tenth more than the history, so its first bar does not touch the edge.
  const fitted = Math.round(((data.now - first) * 1.1) / 60) * 60;
  return Math.min(Math.max(fitted, FIT_MIN_S), state.view.window);
}

function zoom(factor) {
  const span = Math.round(state.span * factor);
  setWindow(Math.min(Math.max(span, MIN_WINDOW_S), MAX_WINDOW_S));
}

function setWindow(seconds) {
  if (seconds === state.view.window && state.view.chosen) return;
  state.view.window = seconds;
  state.view.chosen = true;
  writeView();
  refresh();
}

// --- machine use ----------------------------------------------------------------------------------

function recordUsage(usage, status) {
  // The header's "CPU in use now": from this tab's last two readings (the chart's history
  // comes from the service).
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
  const gpus = status.capacity.gpus.length;
  document.getElementById("use-summary").textContent =
    `cores allocated ${allocated}/${usage.cpus}` +
    (used == null ? "" : `, CPU in use ${used.toFixed(1)} cores`) +
    (gpus ? `, GPUs ${gpus}` : "") +
    `, ${status.running} running, ${status.queued} waiting`;
}

function renderUsage(history) {
  const host = document.getElementById("usage");
  const width = Math.max(host.clientWidth || 800, 400), height = 130, left = 60, right = 12;
  const bottom = height - 34, top = 8;
  const end = history.now, start = end - Math.min(state.span, USAGE_WINDOW_MAX_S);
  const capacity = Math.max(history.cpus, 1);
  const x = (t) => left + ((t - start) / Math.max(end - start, 1e-9)) * (width - left - right);
  const y = (v) => bottom - (v / capacity) * (bottom - top);
  const chart = svg("svg", { width, height, role: "img", "aria-label": "machine use" });
  drawTicks(chart, x, start, end, width - left - right, top, bottom);
  chart.append(svg("text", { x: 4, y: y(capacity) + 4, class: "axis" }, `${capacity} cores`));
  chart.append(svg("text", { x: 4, y: y(0), class: "axis" }, "0"));
  const points = history.points.map(([t, allocated, used]) => ({ t, allocated, used }));
  const line = (key) => points.filter((p) => p[key] != null)
    .map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ");
  if (points.length) {
    chart.append(svg("polyline", { points: line("allocated"), class: "allocated" }));
    chart.append(svg("polyline", { points: line("used"), class: "used" }));
  }
  chart.append(svg("text", { x: left, y: height - 2, class: "axis" }, points.length
    ? `${points.length} samples (one every ${history.every_s}s) since ${clock(points[0].t)}`
    : "no samples in this window yet"));
  host.replaceChildren(chart);
}

// --- one job ------------------------------------------------------------------------------------

// Each event's words, with why the service decided it (its `why`, shown as it is) where it says.
const because = (d) => (d.why ? `: ${d.why}` : "");
const EVENT_WORDS = {
  state: (d) => `${d.from} -> ${d.to}` + (d.cpus ? ` on cores ${cores(d.cpus)}` : "") +
    ((d.why || d.error) ? `: ${d.why || d.error}` : ""),
  allocation: (d) => `re-sized from cores ${cores(d.from)} to ${cores(d.to)}` + because(d),
  launched: (d) => `runner started (pid ${d.pid}, attempt ${d.attempt}) on cores ${cores(d.cpus)}` +
    because(d),
  admitted: (d) => d.why ? String(d.why) : `by ${d.policy}: ` +
    (d.guaranteed ? "deadline guaranteed" : "not guaranteed (best effort)"),
  promise: (d) => `${d.promise}${because(d)}`,
  profiling: (d) => String(d.why ?? ""),
  declining: (d) => String(d.why ?? ""),
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
  state.view.job = jobId;
  writeView();
  document.getElementById("detail-section").hidden = !jobId;
  for (const row of document.querySelectorAll("#jobs tbody tr")) {
    row.classList.toggle("selected", row.dataset.job === jobId);
  }
  if (!jobId) return;
  const path = `/jobs/${encodeURIComponent(jobId)}`;
  document.getElementById("log-download").href = `${path}/logs?download=1`;
  document.getElementById("detail-link").href = `#job=${encodeURIComponent(jobId)}`;
  refreshDetail().catch((error) => {
    document.getElementById("detail-title").textContent = `${jobId}: ${error.message}`;
  });
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
  const span = state.view.window;
  // Typing in the filter starts a refresh per key: only the latest one draws.
  const ticket = (state.ticket = (state.ticket || 0) + 1);
  state.inFlight = (state.inFlight || 0) + 1;
  try {
    const [status, table, timeline, usage, history] = await Promise.all([
      api("GET", "/status"), api("GET", `/jobs?${jobsQuery()}`),
      api("GET", `/timeline?window=${span}`), api("GET", "/usage"),
      // A service without the history (an older one) still gets the rest of the page.
      api("GET", `/usage/history?window=${Math.min(span, USAGE_WINDOW_MAX_S)}`).catch(() => null),
    ]);
    if (ticket !== state.ticket) return;
    document.getElementById("policy").textContent = `policy ${status.policy}`;
    renderJobs(table, timeline.now);
    renderTimeline(timeline);
    recordUsage(usage, status);
    if (history) renderUsage(history);
    if (!state.firstDrawn) {
      state.firstDrawn = true;
      // How long the page took to show the service's jobs: from navigation to here.
      performance.mark("qosched:drawn");
    }
    if (status.trouble) {
      // The service cannot read or write what happened: the rows above may be behind.
      setConnection(`the service is in trouble since ${clock(status.trouble_since)}: ` +
        `${status.trouble}; job states may be behind`, true);
    } else {
      setConnection(`updated ${clock(timeline.now)}`, false);
    }
  } catch (error) {
    if (error.message !== "signed out") setConnection(`cannot reach the service: ${error.message}`, true);
  } finally {
    state.inFlight -= 1;
  }
}

function followView() {
  state.view = readView();
  const filter = document.getElementById("state-filter");
  filter.value = state.view.state;
  if (filter.value !== state.view.state) state.view.state = ""; // not one of the page's
  document.getElementById("text-filter").value = state.view.q;
  if (state.view.job !== state.selected) select(state.view.job);
  if (state.view.job) document.getElementById("detail-section").scrollIntoView();
  refresh();
}

function changeView(changes) {
  Object.assign(state.view, changes, { page: changes.page ?? 1 });
  writeView();
  refresh();
}

document.getElementById("submit-form").addEventListener("submit", submit);
document.getElementById("spec-file").addEventListener("change", () => {
  document.getElementById("spec-text").value = "";
});
document.getElementById("state-filter").addEventListener("change",
  (event) => changeView({ state: event.target.value }));
document.getElementById("text-filter").addEventListener("input",
  (event) => changeView({ q: event.target.value }));
document.getElementById("page-previous").addEventListener("click",
  () => changeView({ page: Math.max(state.view.page - 1, 1) }));
document.getElementById("page-next").addEventListener("click",
  () => changeView({ page: state.view.page + 1 }));
for (const th of document.querySelectorAll("#jobs th[data-sort]")) {
  th.addEventListener("click", () => sortBy(th.dataset.sort));
}
for (const button of document.querySelectorAll("#zoom button[data-window]")) {
  button.addEventListener("click", () => setWindow(Number(button.dataset.window)));
}
document.getElementById("zoom-in").addEventListener("click", () => zoom(1 / 2));
document.getElementById("zoom-out").addEventListener("click", () => zoom(2));
document.getElementById("timeline").addEventListener("wheel", (event) => {
  event.preventDefault();
  zoom(event.deltaY > 0 ? 1.25 : 0.8);
}, { passive: false });
document.getElementById("detail-close").addEventListener("click", () => select(null));
window.addEventListener("hashchange", followView);
followView();
// A poll waits for the one before it: a slow service is not sent a second round of requests
// (which would each supersede the last, so that none is drawn).
setInterval(() => { if (!state.inFlight) refresh(); }, POLL_MS);
setInterval(() => refreshDetail().catch(() => {}), DETAIL_POLL_MS);
