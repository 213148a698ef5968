// Polls /dashboard/state every second and redraws; the charts (charts.js) follow
// /dashboard/series, sampled every few seconds; warm/unload post to /control with CSRF.
"use strict";

const csrf = () => (document.cookie.match(/(?:^|; )csrftoken=([^;]+)/) || [])[1] || "";
const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
const secs = (s) => (s == null ? "–" : `${s.toFixed(2)} s`);
const busy = new Set(); // models with a warm/unload in flight

// Axis and legend values: whole numbers as they are, others with a decimal or two.
const count = (v) => (Number.isInteger(v) ? `${v}` : v.toFixed(1));
const rate = (v) => `${v < 10 && !Number.isInteger(v) ? v.toFixed(1) : v.toFixed(0)} tok/s`;
const percent = (v) => `${(100 * v).toFixed(0)}%`;
const size = (b) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(1)} GiB` : mib(b));
const seconds = (v) => `${v < 1 ? v.toFixed(2) : v.toFixed(1)} s`;
// One chart per quantity of /dashboard/series (observability/series.py), in this order.
const CHARTS = [
  { id: "generated_tokens_per_second", title: "Tokens/s generated", format: rate, empty: "No traffic yet" },
  { id: "prompt_tokens_per_second", title: "Prompt tokens/s read (counted as requests finish)", format: rate,
    empty: "No traffic yet" },
  { id: "running", title: "Running sequences", format: count, empty: "Nothing running at any sample yet" },
  { id: "queued", title: "Queued sequences", format: count, empty: "Nothing queued at any sample yet" },
  { id: "time_to_first_token", title: "Time to first token (p50, p95 dashed)", format: seconds,
    empty: "No traffic yet" },
  { id: "memory", title: "Memory", format: size, scale: 2 ** 20, empty: "No samples yet" },
  { id: "prefix_cache_hit_rate", title: "Prefix cache hits (share of prompt tokens)", format: percent, top: 1,
    empty: "No traffic yet" },
  { id: "draft_acceptance", title: "Draft tokens kept (speculation)", format: percent, top: 1,
    empty: "No drafts verified yet" },
];
let seriesAt = 0; // when the series were last fetched (ms)

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function fill(tbody, rows, emptyText, columns) {
  tbody.replaceChildren(...rows);
  if (!rows.length) {
    const tr = document.createElement("tr");
    tr.className = "empty";
    const td = cell(emptyText);
    td.colSpan = columns;
    tr.append(td);
    tbody.append(tr);
  }
}

function loadedRow(m) {
  const tr = document.createElement("tr");
  tr.dataset.model = m.id;
  const kernels = m.activations ? `CPU kernels, ${m.activations} activations` : "CPU kernels";
  // "stored" alone does not say what is stored: the weights ("4-bit g32", "bfloat16") do.
  const stored = m.compute_format === "stored" && m.weights;
  const computed = stored ? `stored · ${m.weights}` : m.compute_format;
  const format = cell(m.cpu_kernels ? `${computed} · ${kernels}` : computed);
  format.title = m.q6_k ? `${m.format_reason}; ${m.q6_k}` : m.format_reason;
  const context = m.context_length ? `${m.context_length} tokens` : "";
  tr.append(cell(m.id), cell(mib(m.bytes)), format, cell(m.kv_cache), cell(context),
    cell(m.pinned ? "yes" : ""),
    cell(m.active_sequences), cell(m.queued_sequences), cell(m.tokens_per_second),
    cell(m.prefix_disk_hits ? `${m.prefix_disk_hits} (${m.prefix_disk_tokens} tokens)` : ""),
    cell(drafts(m)), cell(`${m.idle_seconds.toFixed(0)} s`));
  return tr;
}

// Speculative decoding since the model loaded: draft tokens kept of those verified, and the
// steps whose rejections recurrent state or sliding windows were fed again for.
function drafts(m) {
  if (!m.draft_tokens) return m.mtp_heads ? "MTP head, none drafted yet" : "";
  const rate = Math.round((100 * m.accepted_draft_tokens) / m.draft_tokens);
  const replays = m.replayed_steps ? ` · ${m.replayed_steps} of ${m.verify_steps} steps replayed` : "";
  const kinds = Object.entries(m.drafters || {});
  const each = kinds.length > 1
    ? " · " + kinds.map(([k, d]) => `${k} ${d.accepted_draft_tokens}/${d.draft_tokens}`).join(", ")
    : kinds.length ? ` · ${kinds[0][0]}` : "";
  return `${m.accepted_draft_tokens} of ${m.draft_tokens} kept (${rate}%)${each}${replays}`;
}

// The prefix cache's disk tier: its folder's size and this process's reads and writes.
function prefixDisk(disk) {
  if (!disk) return "off";
  const dropped = disk.dropped_writes ? ` · ${disk.dropped_writes} writes dropped` : "";
  const failed = disk.failed_reads ? ` · ${disk.failed_reads} unreadable` : "";
  return `${disk.entries} prefixes · ${mib(disk.bytes)} of ${mib(disk.max_bytes)} · ` +
    `${disk.hits} hits, ${disk.misses} misses · ${disk.writes} written${dropped}${failed}`;
}

function catalogRow(entry) {
  const tr = document.createElement("tr");
  tr.dataset.model = entry.id;
  const status = busy.has(entry.id) ? "working…" : entry.loaded ? "loaded" : "not loaded";
  const actions = document.createElement("td");
  for (const action of ["warm", "unload"]) {
    const button = document.createElement("button");
    button.className = action;
    button.textContent = action === "warm" ? "Warm" : "Unload";
    button.disabled = busy.has(entry.id) || (action === "warm" ? entry.loaded || !entry.enabled : !entry.loaded);
    button.addEventListener("click", () => control(entry.id, action));
    actions.append(button, " ");
  }
  tr.append(cell(entry.id), cell(status, entry.loaded ? "status loaded" : "status"),
    cell(entry.enabled ? "yes" : "no"), actions);
  return tr;
}

function recentRow(r) {
  const tr = document.createElement("tr");
  const failed = r.status >= 400 || r.error_code;
  tr.append(cell(new Date(r.at * 1000).toLocaleTimeString()), cell(r.endpoint), modelCell(r),
    cell(r.key), cell(r.error_code ? `${r.status} ${r.error_code}` : r.status, failed ? "bad" : ""),
    cell(`${r.prompt_tokens} / ${r.completion_tokens}`), cell(secs(r.time_to_first_token)),
    cell(secs(r.duration)), cell(r.finish_reason || ""));
  return tr;
}

// The model that served the request; for a refused one, the name it asked for; for an alias,
// the name asked and the model that answered.
function modelCell(r) {
  if (!r.model) {
    const td = cell(r.asked_model || "–", r.asked_model ? "asked" : "");
    if (r.asked_model) td.title = "asked for; no model served it";
    return td;
  }
  return cell(r.asked_model && r.asked_model !== r.model ? `${r.asked_model} → ${r.model}` : r.model);
}

async function control(model, action) {
  busy.add(model);
  refresh();
  try {
    const response = await fetch(`/control/models/${encodeURIComponent(model)}/${action}`, {
      method: "POST", headers: { "X-CSRFToken": csrf() }, credentials: "same-origin",
    });
    const notice = document.getElementById("notice");
    notice.textContent = "";
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      notice.textContent = `${action} ${model}: ${(body.error && body.error.message) || response.status}`;
    }
  } finally {
    busy.delete(model);
    refresh();
  }
}

async function refresh() {
  let state;
  try {
    const response = await fetch("/dashboard/state", { credentials: "same-origin" });
    if (!response.ok) throw new Error(response.status);
    state = await response.json();
  } catch (error) {
    document.getElementById("updated").textContent = `Cannot reach the server (${error.message}).`;
    return;
  }
  const { engine, pool, backend, recent } = state;
  document.getElementById("engine-state").textContent = engine.ready
    ? `ready${engine.restarts ? ` (${engine.restarts} restarts)` : ""}`
    : engine.problems.join("; ") || "restarting";
  document.getElementById("running").textContent = engine.running;
  document.getElementById("queued").textContent = engine.queued;
  document.getElementById("tokens-per-second").textContent = engine.tokens_per_second;
  document.getElementById("memory").textContent = `${mib(pool.used_bytes)} of ${mib(pool.budget_bytes)}`;
  document.getElementById("prefix-disk").textContent = prefixDisk(engine.prefix_cache_disk);
  document.getElementById("backend").textContent =
    `${backend.device} · BLAS: ${backend.blas} · CPU kernels: ${backend.cpu_kernels || "starting"}` +
    (backend.distributed ? ` · rank 0 of ${backend.distributed.size} (${backend.distributed.backend})` : "");
  fill(document.querySelector("#loaded-models tbody"), pool.models.map(loadedRow), "No model loaded.", 12);
  fill(document.querySelector("#catalog tbody"), pool.catalog.map(catalogRow), "The catalog is empty.", 4);
  fill(document.querySelector("#recent-requests tbody"), recent.map(recentRow), "No requests yet.", 9);
  document.getElementById("updated").textContent = `Updated ${new Date().toLocaleTimeString()}`;
  if (Date.now() - seriesAt >= 1000 * (state.series_interval_seconds || 5)) refreshCharts();
}

function makeCharts() {
  const section = document.getElementById("charts");
  for (const spec of CHARTS) {
    const figure = document.createElement("figure");
    figure.className = "chart";
    figure.id = `chart-${spec.id}`;
    const caption = document.createElement("figcaption");
    caption.textContent = spec.title;
    figure.append(caption);
    section.append(figure);
  }
}

async function refreshCharts() {
  seriesAt = Date.now();
  const status = document.getElementById("charts-status");
  let series;
  try {
    const response = await fetch("/dashboard/series", { credentials: "same-origin" });
    if (!response.ok) throw new Error(response.status);
    series = await response.json();
  } catch (error) {
    status.textContent = `Cannot read the history (${error.message}).`;
    return;
  }
  status.textContent = `This instance, one sample every ${series.interval_seconds} s, ` +
    `the last ${series.span_seconds / 60} minutes (${series.at.length} samples).`;
  for (const spec of CHARTS) {
    Charts.draw(document.getElementById(`chart-${spec.id}`), spec, series.at, series.quantities[spec.id] || {});
  }
}

makeCharts();
refresh();
setInterval(refresh, 1000);
