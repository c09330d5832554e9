// The Caovan dashboard: the daemon's /status and /events (state changes, swaps and the engine's samples),
// /logs/stream, /models, /plugins, /doctor and the GPU series of /metrics, drawn without any library or network
// beyond the daemon. With a models table, the Engine card, the charts and the plugin follow the primary model (the
// table's first, the one /status's top level describes); the Models card lists them all.

import { adminCall } from "./admin.js";
import { LineChart } from "./chart.js";

const $ = (id) => document.getElementById(id);
const WINDOW_S = 600;
const LOG_LINES = 800;

const percent = (v) => `${(v * 100).toFixed(0)}%`;
const charts = {
  tps: new LineChart($("chart-tps"), {
    windowS: WINDOW_S, legend: $("legend-tps"), format: (v) => v.toFixed(v < 10 ? 1 : 0),
    series: [{ name: "generation tok/s", color: "#2f6fdb" }, { name: "prompt tok/s", color: "#e0832b" }],
  }),
  acceptance: new LineChart($("chart-acceptance"), {
    windowS: WINDOW_S, legend: $("legend-acceptance"), format: percent, min: 0, max: 1,
    series: [{ name: "draft acceptance", color: "#1f9d55" }],
  }),
  length: new LineChart($("chart-length"), {
    windowS: WINDOW_S, legend: $("legend-length"), format: (v) => v.toFixed(2),
    series: [{ name: "mean acceptance length", color: "#8b5cf6" }],
  }),
};

let status = null;
let statusTimer = null;
let modelMode = null;  // /models' routed and fairness_s

/** Whether an event's `model` is the primary model (the stream's first event, the status, names the models). */
const isPrimary = (model) => model === status?.models?.[0]?.name;

// Durations and times ----------------------------------------------------------------------------------------------

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

const clock = (epoch) => new Date(epoch * 1000).toLocaleTimeString();

/** The name clients use (--served-model-name), else the model's last path component; the full path is a tooltip. */
function modelName(doc) {
  const command = doc.command ?? [];
  const served = command.indexOf("--served-model-name");
  if (served >= 0 && command[served + 1]) return command[served + 1];
  return (doc.model ?? "–").split("/").filter(Boolean).at(-1) ?? "–";
}

// Status -----------------------------------------------------------------------------------------------------------

function renderStatus(doc) {
  status = { ...doc, receivedAt: performance.now() };
  const badge = $("state");
  badge.textContent = doc.state;
  badge.dataset.state = doc.state;
  document.body.dataset.state = doc.state;
  $("state-reason").textContent = doc.reason ? `(${doc.reason})` : "";
  const name = modelName(doc);
  $("model").textContent = name;
  $("model-detail").textContent = `${name}${doc.embedded_default ? " (embedded default)" : ""}`;
  $("model").title = $("model-detail").title = doc.model ?? "";
  const engine = doc.engine;
  $("ready-after").textContent = engine?.ready_s != null ? `${engine.ready_s} s` : "–";
  $("run").textContent = engine
    ? `run ${engine.run_id}, pid ${engine.pid ?? "–"}${engine.alive ? "" : " (gone)"}` : "–";
  $("vllm-version").textContent = engine?.vllm_version ?? "–";
  $("restarts").textContent = `${doc.restarts} since the daemon started` +
    (doc.consecutive_failures ? `, ${doc.consecutive_failures} failed in a row` : "");
  $("last-error").textContent = doc.last_error || "none";
  $("last-error").dataset.none = String(!doc.last_error);
  $("proxy").textContent = `${doc.proxy.in_flight} in flight, ${doc.proxy.queued} queued (gate ${doc.proxy.gate})`;
  $("command").textContent = (doc.command ?? []).join(" ");
  tickUptimes();

  $("plugin-running").textContent = doc.plugin.running_version ? `v${doc.plugin.running_version}` : "no banner yet";
  $("plugin-active").textContent = doc.plugin.active_version ?? "bundled";
  $("plugin-bundled").textContent = `v${doc.plugin.bundled_version}`;
  // The markers, their names and their wording come from the daemon (the engine-daemon contract), in its order.
  $("markers").replaceChildren(...(doc.marker_list ?? []).map((marker) => {
    const item = document.createElement("li");
    item.dataset.marker = marker.kind;
    item.dataset.seen = String(marker.seen);
    item.textContent = `${marker.label}: ${marker.seen ? marker.text : "not seen in this run"}`;
    return item;
  }));
  renderTensorCore75(doc.tensorcore75);
  renderCanary(doc.canary);
  const act = doc.activation;
  $("activation").textContent = act
    ? `${switchLabel(act.kind, act.from_version, act.to_version, act.from_draft_vocab, act.to_draft_vocab)}: ` +
      act.phase : "";

  renderRestarts(doc.recent_restarts ?? []);
  renderModels(doc.models ?? []);
  for (const [kind, sample] of Object.entries(doc.latest ?? {})) {
    if (kind === "spec_decode") renderPositions(sample);
  }
}

/** TensorCore75: ACTIVE or off (with why), and the kernel counts of the engine process that compiled the most. */
function renderTensorCore75(tc) {
  const state = $("tc75-state");
  state.dataset.state = tc?.state ?? "none";
  state.textContent = tc?.state
    ? `${tc.state === "active" ? "ACTIVE" : "off"} (triton ${tc.triton}, mode ${tc.mode}): ${tc.detail}`
    : "not reported by this engine";
  const k = tc?.kernels;
  const kept = k ? Object.entries(k.kept_by_reason).map(([reason, n]) => `${reason} ${n}`).join(", ") : "";
  $("tc75-kernels").textContent = k
    ? `${k.retargeted} of ${k.total} retargeted to tensor cores, ${k.kept} kept on FMA${kept ? ` (${kept})` : ""}`
    : "–";
}

/** OutputLock: the last canary's verdict; while degraded, the failed one's evidence. */
function renderCanary(canary) {
  const box = $("canary");
  const shown = canary?.degraded ?? canary?.last;
  document.body.dataset.degraded = String(Boolean(canary?.degraded));
  box.dataset.result = canary?.degraded ? "degraded" : (shown?.result ?? "none");
  if (!shown) {
    box.textContent = canary?.running ? `canary running (${canary.running})` : "not checked yet";
    return;
  }
  const when = new Date(shown.at * 1000).toLocaleTimeString();
  let line = `canary ${shown.result.replace("_", " ")} (${shown.purpose}, ${when}): ${shown.detail}`;
  const e = shown.evidence;
  if (e) {
    line += `; first at token ${e.position} of "${e.prompt}": decode ${JSON.stringify(e.got_text)}, prefill ` +
      `${JSON.stringify(e.expected_text)} (margin ${e.at_least ? "> " : ""}${e.margin.toFixed(3)})`;
  }
  box.textContent = canary.degraded ? `DEGRADED: ${line}` : line;
}

function tickUptimes() {
  if (!status) return;
  const elapsed = (performance.now() - status.receivedAt) / 1000;
  $("state-detail").textContent = `${status.state} for ${duration(status.state_seconds + elapsed)}`;
  const engine = status.engine;
  const running = engine && engine.alive;
  $("engine-uptime").textContent = running ? duration(engine.uptime_s + elapsed) : "not running";
  $("daemon-uptime").textContent = duration(status.daemon.uptime_s + elapsed);
}

async function refreshStatus() {
  try {
    const response = await fetch("/status");
    if (response.ok) renderStatus(await response.json());
  } catch {
    // The daemon is away; the event stream's reconnection shows that.
  }
}

/** Coalesce the /status fetches that a burst of events asks for. */
function scheduleStatus() {
  clearTimeout(statusTimer);
  statusTimer = setTimeout(refreshStatus, 300);
}

// Restarts and state history ---------------------------------------------------------------------------------------

const stateChanges = [];

function renderRestarts(restarts) {
  const items = [
    ...restarts.map((r) => ({ at: r.at, text: `restart (${r.cause}): ${r.reason}`, kind: "restart" })),
    ...stateChanges,
  ].sort((a, b) => b.at - a.at).slice(0, 40);
  if (!items.length) {
    $("history").innerHTML = '<li class="muted">no restart since the daemon started</li>';
    return;
  }
  $("history").replaceChildren(...items.map((entry) => {
    const li = document.createElement("li");
    li.dataset.kind = entry.kind;
    li.textContent = `${clock(entry.at)} ${entry.text}`;
    return li;
  }));
}

// Samples ----------------------------------------------------------------------------------------------------------

function renderPositions(sample) {
  const rates = sample.per_position ?? [];
  const box = $("positions");
  if (!rates.length) return;
  box.replaceChildren(...rates.map((rate, index) => {
    const row = document.createElement("div");
    row.className = "position";
    row.dataset.position = String(index);
    const label = document.createElement("span");
    label.textContent = `position ${index + 1}`;
    const bar = document.createElement("div");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.width = `${Math.max(0, Math.min(1, rate)) * 100}%`;
    bar.append(fill);
    const value = document.createElement("span");
    value.className = "value";
    value.textContent = percent(rate);
    row.append(label, bar, value);
    return row;
  }));
  $("spec-totals").textContent = `latest interval: ${sample.accepted} of ${sample.drafted} draft tokens accepted` +
    (sample.mean_acceptance_length != null ? `, ${sample.mean_acceptance_length.toFixed(2)} tokens per step` : "");
}

function onSample(event) {
  const time = event.time ?? Date.now() / 1000;
  if (event.kind === "throughput") {
    charts.tps.push(0, time, event.generation_tps);
    charts.tps.push(1, time, event.prompt_tps);
  } else if (event.kind === "spec_decode") {
    charts.acceptance.push(0, time, event.acceptance_rate);
    charts.length.push(0, time, event.mean_acceptance_length);
    renderPositions(event);
  }
}

// The daemon's event stream ----------------------------------------------------------------------------------------

let newestEvent = 0;  // the time of the newest event drawn

function connectEvents() {
  const source = new EventSource("/events");
  source.onopen = () => {
    $("connection").dataset.live = "true";
    $("connection").textContent = "live";
    readModelMode();  // a daemon started again may have another models table
  };
  source.onerror = () => {
    $("connection").dataset.live = "false";
    $("connection").textContent = "reconnecting…";
  };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (event.type === "status") {
      renderStatus(event);
      return;
    }
    // Each (re)connection starts with the daemon's last ten minutes: draw each event once.
    if (event.time <= newestEvent) return;
    newestEvent = event.time;
    if (event.type === "state") {
      const named = (status?.models?.length ?? 0) > 1 ? `${event.model} ` : "";
      stateChanges.push({ at: event.time, kind: "state", text: `${named}${event.state}: ${event.reason ?? ""}` });
      if (status && isPrimary(event.model)) {
        renderStatus({ ...status, state: event.state, reason: event.reason, state_seconds: 0 });
      }
      scheduleStatus();  // the rest of /status (run, uptime, restarts, the model rows) changes with the state
    } else if (event.type === "swap") {
      stateChanges.push({
        at: event.time, kind: "swap",
        text: `swap: ${event.model} in for ${event.evicted.join(", ")} after ${event.seconds} s`,
      });
      scheduleStatus();
    } else if (event.type === "log_event") {
      if (!isPrimary(event.model)) return;  // one line per chart: the primary model's engine
      if (event.kind === "throughput" || event.kind === "spec_decode") {
        onSample(event);
      } else {
        scheduleStatus();  // markers, engine config and fatal lines change /status
      }
    } else if (event.type === "canary") {
      if (event.result !== "passed" || event.purpose !== "periodic") {
        const named = (status?.models?.length ?? 0) > 1 ? `${event.model} ` : "";
        stateChanges.push({ at: event.time, kind: "canary", text: `${named}canary (${event.purpose}): ${event.result}` });
      }
      scheduleStatus();
    } else if (event.type === "activation") {
      const details = event.details ?? {};
      stateChanges.push({
        at: event.time, kind: "activation",
        text: `${switchLabel(details.kind, event.from_version, event.to_version, details.from_draft_vocab,
                             details.to_draft_vocab)}: ${event.outcome} (${event.reason})`,
      });
      scheduleStatus();
      refreshPlugins();
    }
  };
}

// A verified switch as the status and the events name it: a plugin activation, or a DraftVocab switch.
function switchLabel(kind, fromVersion, toVersion, fromDraft, toDraft) {
  if (kind === "draft_vocab") {
    const draft = (setting) => setting == null ? "off" : JSON.stringify(setting);
    return `DraftVocab ${draft(fromDraft)} → ${draft(toDraft)}`;
  }
  return `plugin ${fromVersion ?? "bundled"} → ${toVersion ?? "bundled"}`;
}

// Log tail ---------------------------------------------------------------------------------------------------------

const logLines = [];
let logNewest = 0;
let logReceived = 0;

function renderLog() {
  const filter = $("log-filter").value.trim().toLowerCase();
  const box = $("log");
  const shown = filter ? logLines.filter((r) => r.line.toLowerCase().includes(filter)) : logLines;
  box.replaceChildren(...shown.map((record) => {
    const line = document.createElement("div");
    if (record.source !== "engine") line.className = "daemon";
    line.textContent = record.line;
    return line;
  }));
  $("log-count").textContent = `${logLines.length} lines`;
  box.dataset.received = String(logReceived);
  if ($("log-follow").checked) box.scrollTop = box.scrollHeight;
}

let logRender = null;
function connectLog() {
  const source = new EventSource("/logs/stream?tail=200");
  source.onmessage = (message) => {
    const record = JSON.parse(message.data);
    // After a reconnection the stream repeats its last lines: keep each line once.
    if (record.time < logNewest) return;
    logNewest = record.time;
    logReceived += 1;
    logLines.push(record);
    if (logLines.length > LOG_LINES) logLines.splice(0, logLines.length - LOG_LINES);
    logRender ??= requestAnimationFrame(() => { logRender = null; renderLog(); });
  };
  $("log-filter").addEventListener("input", renderLog);
  $("log").addEventListener("scroll", () => {
    const box = $("log");
    $("log-follow").checked = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
  });
}

// GPUs (the daemon's /metrics, read where NVML exists) -------------------------------------------------------------

function parseGpuMetrics(text) {
  const gpus = {};
  const pattern = /^caovan_gpu_(\w+)\{gpu="(\d+)"\} (\S+)$/gm;
  for (const [, field, gpu, value] of text.matchAll(pattern)) {
    (gpus[gpu] ??= {})[field] = Number(value);
  }
  return gpus;
}

async function refreshGpus() {
  const box = $("gpus");
  let response;
  try {
    response = await fetch("/metrics");
  } catch {
    return;
  }
  if (response.status === 401) {
    box.innerHTML = '<p class="muted">/metrics needs a key (security.metrics_keys): GPU figures are in Grafana.</p>';
    return;
  }
  const gpus = parseGpuMetrics(await response.text());
  const indices = Object.keys(gpus);
  if (!indices.length) {
    box.innerHTML = '<p class="muted">No NVML GPU visible: the engine runs on the CPU.</p>';
    return;
  }
  box.replaceChildren(...indices.map((index) => {
    const g = gpus[index];
    const used = g.memory_used_bytes ?? 0, total = g.memory_total_bytes || 1;
    const div = document.createElement("div");
    div.className = "gpu";
    div.dataset.gpu = index;
    div.innerHTML = `<strong>GPU ${index}</strong>
      <div>memory ${(used / 2 ** 30).toFixed(1)} / ${(total / 2 ** 30).toFixed(1)} GiB</div>
      <div class="meter"><span style="width:${(100 * used) / total}%"></span></div>
      <div>utilisation ${g.utilization_percent ?? "–"}%</div>
      <div class="meter"><span style="width:${g.utilization_percent ?? 0}%"></span></div>
      <div class="muted">${g.temperature_celsius ?? "–"} °C, ${(g.power_watts ?? 0).toFixed(0)} W</div>`;
    return div;
  }));
}

// Models -----------------------------------------------------------------------------------------------------------

const NOTHING_TO_LOAD = new Set(["starting", "checking", "waking", "ready"]);
const NOTHING_TO_UNLOAD = new Set(["stopped", "failed"]);
// An asleep model (vLLM's sleep mode) keeps its process, not its GPU memory: it is not in a newcomer's way.
const HOLDS_NO_GPU = new Set([...NOTHING_TO_UNLOAD, "asleep"]);

/** Whether two models would share a GPU (no GPU list: every GPU). */
const shareGpus = (a, b) => a.gpus === null || b.gpus === null || a.gpus.some((gpu) => b.gpus.includes(gpu));

async function readModelMode() {
  try {
    const body = await (await fetch("/models")).json();
    modelMode = { routed: body.routed, fairness: body.fairness_s };
  } catch {
    return;  // the daemon is away; the next connection asks again
  }
  $("models-mode").textContent = modelMode.routed
    ? "Requests pick a model by its name or an alias. Models sharing a GPU take turns: one whose requests wait " +
      `gets the GPUs within ${modelMode.fairness} s (swap.fairness_s), once the one holding them drained.`
    : "One model (no models table in the configuration): it takes every request.";
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function loadAction(row, rows) {
  const leaving = rows.filter((other) => other !== row && !HOLDS_NO_GPU.has(other.state) && shareGpus(row, other))
    .map((other) => other.name);
  return {
    path: `/models/${encodeURIComponent(row.name)}/load`,
    heading: `Load ${row.name}?`,
    explanation: `Its engine ${row.state === "asleep" ? "wakes up" : "starts"} ` + (leaving.length
      ? `once the models sharing its GPUs (${leaving.join(", ")}) finished their in-flight requests (up to the ` +
        "drain timeout) and stopped (or went to sleep, those configured with sleep)." : "now."),
    confirmLabel: "Load",
    what: `Loading ${row.name}`,
  };
}

function unloadAction(row) {
  // Without a models table nothing loads the model on demand: it stays stopped.
  const after = modelMode === null ? "" : modelMode.routed ? "; its next request loads it again"
    : "; it serves nothing until loaded again";
  return {
    path: `/models/${encodeURIComponent(row.name)}/unload`,
    heading: `Unload ${row.name}?`,
    explanation: `Its in-flight requests finish first (up to the drain timeout), then its engine stops${after}.`,
    confirmLabel: "Unload",
    what: `Unloading ${row.name}`,
  };
}

function actionButton(label, action, disabled) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "small";
  button.dataset.action = label.toLowerCase();
  button.textContent = label;
  button.disabled = disabled;
  button.addEventListener("click", () => adminCall(action).then(scheduleStatus));
  return button;
}

function renderModels(rows) {
  const now = Date.now() / 1000;
  $("models").replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    tr.dataset.model = row.name;
    const name = cell(row.name, "name");
    name.title = row.model;
    if (row.aliases.length) {
      const aliases = document.createElement("span");
      aliases.className = "muted";
      aliases.textContent = ` (${row.aliases.join(", ")})`;
      name.append(aliases);
    }
    const state = cell(row.state, "state");
    state.dataset.state = row.state;
    state.title = `for ${duration(row.state_seconds)}${row.reason ? `: ${row.reason}` : ""}`;
    const actions = cell("", "row-actions");
    actions.append(actionButton("Load", loadAction(row, rows), NOTHING_TO_LOAD.has(row.state)),
      actionButton("Unload", unloadAction(row), NOTHING_TO_UNLOAD.has(row.state)));
    tr.append(name, cell(row.gpus ? row.gpus.join(", ") : "all"), state,
      cell(row.last_used === null ? "never" : `${duration(now - row.last_used)} ago`), cell(String(row.swaps)),
      cell(`${row.proxy.queued} queued, ${row.proxy.in_flight} in flight`), actions);
    return tr;
  }));
}

// Plugins and admin actions ----------------------------------------------------------------------------------------

async function refreshPlugins() {
  let body;
  try {
    body = await (await fetch("/plugins")).json();
  } catch {
    return;
  }
  const entries = [
    { version: "bundled", label: `bundled v${body.bundled.version}`, active: body.bundled.active },
    ...body.versions.map((v) => ({ version: v.version, label: `v${v.version}`, active: v.active })),
  ];
  $("versions").replaceChildren(...entries.map((entry) => {
    const li = document.createElement("li");
    li.dataset.version = entry.version;
    const name = document.createElement("span");
    name.textContent = `${entry.label}${entry.active ? " (active)" : ""}`;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "small";
    button.textContent = "Activate";
    button.disabled = entry.active || body.activation_in_progress;
    button.addEventListener("click", () => adminCall({
      path: `/plugins/${encodeURIComponent(entry.version)}/activate`,
      heading: `Activate plugin ${entry.label}?`,
      explanation: "The daemon drains in-flight requests, restarts the engine on this version and verifies it " +
        "(banner, readiness, a smoke completion, acceptance and tokens/s); a worse version is rolled back.",
      confirmLabel: "Activate",
      what: `Activating ${entry.label}`,
    }).then(() => refreshPlugins()));
    li.append(name, button);
    return li;
  }));
}

function setupAdmin() {
  $("restart-button").addEventListener("click", () => adminCall({
    path: "/restart",
    heading: "Restart the engine?",
    explanation: "In-flight requests finish first (up to the drain timeout); requests arriving meanwhile wait in " +
      "the daemon's queue and are served once the engine is ready again.",
    confirmLabel: "Restart",
    what: "Restart",
  }).then(scheduleStatus));
}

// Doctor -----------------------------------------------------------------------------------------------------------

function doctorRows(doc) {
  if (doc.report?.checks) {
    return doc.report.checks.map((c) => [c.status, c.group ? `${c.group}: ${c.name}` : c.name, c.detail, c.fix]);
  }
  return (doc.checks ?? []).map((c) => [c.ok ? "PASS" : "FAIL", c.name,
    Array.isArray(c.detail) ? c.detail.join(", ") : String(c.detail), ""]);
}

async function refreshDoctor(rerun) {
  const summary = $("doctor-summary");
  summary.textContent = rerun ? "running the doctor again…" : "running the doctor…";
  $("doctor-refresh").disabled = true;
  try {
    const response = await fetch(`/doctor${rerun ? "?refresh=1" : ""}`);
    const doc = await response.json();
    const counts = doc.report?.summary
      ? Object.entries(doc.report.summary).map(([k, v]) => `${v} ${k}`).join(", ") : "";
    summary.textContent = [`source: ${doc.source}`, counts, doc.note, doc.error,
      doc.checked_at ? `checked ${clock(doc.checked_at)}${doc.cached ? " (cached)" : ""}` : ""]
      .filter(Boolean).join(" · ");
    const table = $("doctor");
    const head = document.createElement("tr");
    for (const name of ["", "check", "detail", "what to do"]) {
      const th = document.createElement("th");
      th.textContent = name;
      head.append(th);
    }
    table.replaceChildren(head, ...doctorRows(doc).map(([state, name, detail, fix]) => {
      const tr = document.createElement("tr");
      for (const [index, value] of [state, name, detail, fix].entries()) {
        const td = document.createElement("td");
        td.textContent = value ?? "";
        if (index === 0) {
          td.className = "status";
          td.dataset.status = state;
        }
        tr.append(td);
      }
      return tr;
    }));
  } catch (error) {
    summary.textContent = `the doctor did not answer: ${error.message}`;
  } finally {
    $("doctor-refresh").disabled = false;
  }
}

// Start ------------------------------------------------------------------------------------------------------------

connectEvents();
connectLog();
setupAdmin();
refreshPlugins();
refreshGpus();
refreshDoctor(false);
$("doctor-refresh").addEventListener("click", () => refreshDoctor(true));
setInterval(refreshStatus, 5000);
setInterval(refreshGpus, 10000);
setInterval(() => {
  tickUptimes();
  Object.values(charts).forEach((chart) => chart.draw());
}, 1000);
