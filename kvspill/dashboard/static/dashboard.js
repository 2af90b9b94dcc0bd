// kvspill dashboard: polls its host once a second and draws uPlot charts. No build step.
// The page's config (#config) says where each kind of data lives: the manager's /api routes,
// or, read-only under `kvspill serve` at /ui, the server's own /v1/kv, /metrics and /logs.
// Its polling URLs carry kvspill_poll=1, so the log pane can leave their access lines out.
(function () {
  "use strict";
  const config = JSON.parse(document.getElementById("config").textContent);
  const src = config.sources;
  const manager = config.mode === "manager";
  const GiB = 1024 ** 3;
  const MAX_POINTS = 120;
  const $ = (id) => document.getElementById(id);

  // ---- API key: from the URL fragment (#key=...), else what was typed, kept for the tab.
  const hashKey = new URLSearchParams(location.hash.slice(1)).get("key");
  if (hashKey) sessionStorage.setItem("kvspill-key", hashKey);
  const keyInput = $("api-key");
  keyInput.value = sessionStorage.getItem("kvspill-key") || "";
  keyInput.addEventListener("change", () => { sessionStorage.setItem("kvspill-key", keyInput.value); refreshRegistry(); });

  function showError(text) { const e = $("error"); e.textContent = text || ""; e.hidden = !text; }
  // What the user's last action (save, start, add) answered: kept until the next action, where
  // the refresh's errors above come and go with each poll.
  function actionError(text) { const e = $("action-error"); e.textContent = text || ""; e.hidden = !text; }

  async function call(url, options) {
    const headers = { "Content-Type": "application/json" };
    if (keyInput.value) headers.Authorization = "Bearer " + keyInput.value;
    const response = await fetch(url, Object.assign({ headers }, options || {}));
    const text = await response.text();
    if (!response.ok) {
      let message = text;
      try { message = JSON.parse(text).error.message; } catch (e) { /* not JSON: the text */ }
      throw new Error(message || response.statusText);
    }
    return text;
  }
  const getJson = async (url) => JSON.parse(await call(url));
  const post = async (url, body) => JSON.parse(await call(url, { method: "POST", body: JSON.stringify(body || {}) }));

  // ---- charts
  function chart(id, labels, colors) {
    const el = $(id);
    const series = [{}].concat(labels.map((label, i) => ({ label, stroke: colors[i], width: 1.5, spanGaps: true })));
    const data = [[]].concat(labels.map(() => []));
    const plot = new uPlot({ width: 420, height: 160, series, axes: [{}, { size: 50 }], legend: { live: false } }, data, el);
    return {
      push(values) {
        data[0].push(Date.now() / 1000);
        values.forEach((v, i) => data[i + 1].push(v === undefined ? null : v));
        if (data[0].length > MAX_POINTS) data.forEach((d) => d.shift());
        plot.setData(data);
        el.dataset.samples = String(Number(el.dataset.samples) + 1);
      },
    };
  }
  const charts = {
    vram: chart("chart-vram", ["used GiB", "budget", "85%", "90%", "95%"], ["#2563eb", "#111", "#ca8a04", "#ea580c", "#dc2626"]),
    gpu: chart("chart-gpu", ["util %", "temp °C", "power W"], ["#16a34a", "#dc2626", "#7c3aed"]),
    cpu: chart("chart-cpu", ["CPU %"], ["#16a34a"]),
    ram: chart("chart-ram", ["RAM used", "RAM total", "KV pool", "cpu tier"], ["#2563eb", "#111", "#16a34a", "#db2777"]),
    host: chart("chart-host", ["RAM used", "pinned", "disk KV"], ["#2563eb", "#db2777", "#92400e"]),
    kv: chart("chart-kv", ["gpu", "cpu", "disk"], ["#16a34a", "#2563eb", "#92400e"]),
    requests: chart("chart-requests", ["running", "waiting", "tok/s"], ["#16a34a", "#ca8a04", "#2563eb"]),
    latency: chart("chart-latency", ["TTFT ms", "ITL ms"], ["#dc2626", "#2563eb"]),
  };

  // ---- Prometheus text: the few series the charts need.
  // every sample of a name added up, whatever its labels (each series carries model_name)
  function prom(text) {
    const out = {};
    for (const line of text.split("\n")) {
      if (!line || line[0] === "#") continue;
      const m = line.match(/^([^\s{]+)(\{[^}]*\})?\s+(\S+)/);
      if (m) out[m[1]] = (out[m[1]] || 0) + Number(m[3]);
    }
    return out;
  }
  let lastMetrics = null;
  function rates(now, m) {
    const prev = lastMetrics;
    lastMetrics = { now, m };
    if (!prev) return [null, null, null];
    const dt = (now - prev.now) / 1000;
    const d = (name) => (m[name] || 0) - (prev.m[name] || 0);
    const mean = (base) => (d(base + "_count") > 0 ? (1000 * d(base + "_sum")) / d(base + "_count") : null);
    return [d("kvspill:generation_tokens_total") / dt, mean("kvspill:time_to_first_token_seconds"), mean("kvspill:inter_token_latency_seconds")];
  }

  // ---- one refresh
  let state = manager ? "stopped" : "running";
  let budget = null;
  async function tick() {
    const now = Date.now();
    if (manager && !keyInput.value) { showError("enter the manager's API key (printed when it started)"); return; }
    let gpu = null, host = null, kv = null, metrics = null;
    try {
      if (src.status) {
        const status = await getJson(src.status);
        state = status.state;
        budget = status.vram_budget_bytes;
        $("state").textContent = state;
        $("state").className = "badge " + state;
        $("state-detail").textContent = status.profile ? `${status.profile} pid ${status.pid || "-"} restarts ${status.restarts}` + (status.error ? ` (${status.error})` : "") : "";
      }
      if (src.system) {
        const system = await getJson(src.system);
        host = system.host;
        gpu = system.gpu.available ? system.gpu.devices[0] : null;
        showPanels(gpu, system.gpu.reason);
      }
      if (state === "running" && !busy) {
        kv = await getJson(src.kv);
        metrics = prom(await call(src.metrics));
        if (!manager) { $("state").textContent = "running"; $("state").className = "badge running"; }
      }
      showError("");
    } catch (e) {
      showError(e.message);
    }
    const tiers = kv ? kv.tiers : null;
    if (gpu) {
      const total = budget || gpu.total_bytes;
      charts.vram.push([gpu.used_bytes / GiB, total / GiB, 0.85 * total / GiB, 0.9 * total / GiB, 0.95 * total / GiB]);
      charts.gpu.push([gpu.utilization_percent, gpu.temperature_c, gpu.power_w]);
    } else if (host) { // a CPU host: the engine's KV pool (the "gpu" tier) lives in RAM
      charts.cpu.push([host.cpu_percent]);
      charts.ram.push([host.ram_used_bytes / GiB, host.ram_total_bytes / GiB, tiers ? tiers.gpu.used_bytes / GiB : null, tiers ? tiers.cpu.used_bytes / GiB : null]);
    }
    charts.host.push([host ? host.ram_used_bytes / GiB : null, host && host.pinned_bytes !== null ? host.pinned_bytes / GiB : null, tiers ? tiers.disk.used_bytes / GiB : null]);
    charts.kv.push(tiers ? [tiers.gpu.used_blocks, tiers.cpu.used_blocks, tiers.disk.used_blocks] : [null, null, null]);
    const [tokPerS, ttft, itl] = metrics ? rates(now, metrics) : [null, null, null];
    charts.requests.push(metrics ? [metrics["kvspill:num_requests_running"], metrics["kvspill:num_requests_waiting"], tokPerS] : [null, null, null]);
    charts.latency.push([ttft, itl]);
    renderRequests(kv);
  }

  // GPU panels where there is a GPU; on a host without one, CPU and RAM panels and the reason.
  // Under `kvspill serve` (no monitor) neither: the KV and request charts still show.
  let panels = null;
  function showPanels(gpu, reason) {
    const want = !src.system ? "none" : gpu ? "gpu" : "cpu";
    const note = want === "gpu" ? gpu.name : want === "cpu" ? `no GPU: ${reason}. Showing CPU, RAM and the KV tiers.`
      : "GPU and host charts: run `kvspill manager`, which samples the host.";
    $("gpu-note").textContent = note;
    if (want === panels) return;
    panels = want;
    document.querySelectorAll(".gpu-panel").forEach((f) => { f.hidden = want !== "gpu"; });
    document.querySelectorAll(".cpu-panel").forEach((f) => { f.hidden = want !== "cpu"; });
    document.querySelectorAll(".host-panel").forEach((f) => { f.hidden = want === "none"; });
  }
  if (!src.system) showPanels(null, null);

  function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); return td; }
  function renderRequests(kv) {
    const body = $("kv-requests").querySelector("tbody");
    body.replaceChildren();
    for (const [id, r] of Object.entries(kv ? kv.requests : {})) {
      const row = body.insertRow();
      [id, r.status, r.num_gpu_blocks, r.num_cpu_blocks, r.num_disk_blocks].forEach((v) => cell(row, v));
    }
  }

  // ---- registry, profiles, plan, control (manager only)
  async function refreshRegistry() {
    if (!manager || !keyInput.value) return;
    let listing;
    try { listing = await getJson(src.api + "/models"); } catch (e) { showError(e.message); return; }
    $("model-select").replaceChildren(...listing.models.map((m) => new Option(`${m.name} (${m.quantization || m.format})`, m.name)));
    renderModels(listing);
    refreshResultsModels(listing);
    const body = $("registry").querySelector("tbody");
    body.replaceChildren();
    for (const p of listing.profiles) {
      const row = body.insertRow();
      row.dataset.profile = p.name;
      cell(row, p.name); cell(row, p.model_name);
      cell(row, Object.entries(p.flags).map(([k, v]) => `${k}=${v}`).join(" ") || "(defaults)");
      const actions = cell(row, "");
      for (const [label, fn] of [["Plan", () => showPlan({ profile: p.name })], ["Start", () => control("start", { profile: p.name })], ["Switch", () => control("switch", { profile: p.name })]]) {
        actions.appendChild(button(label, label.toLowerCase(), fn));
      }
    }
  }

  function button(label, className, onClick) {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = label; b.className = className;
    b.addEventListener("click", onClick);
    return b;
  }

  // Every registered model can start: one without a profile of its own gets NAME-default (serve's defaults).
  function renderModels(listing) {
    const body = $("models").querySelector("tbody");
    body.replaceChildren();
    for (const m of listing.models) {
      const row = body.insertRow();
      row.dataset.model = m.name;
      const profiles = listing.profiles.filter((p) => p.model_name === m.name).map((p) => p.name);
      cell(row, m.name); cell(row, [m.format, m.quantization].filter(Boolean).join(" "));
      cell(row, m.size_bytes ? (m.size_bytes / GiB).toFixed(2) + " GiB" : "-");
      cell(row, profiles.join(", ") || "none: starts with serve's defaults");
      const actions = cell(row, "");
      actions.appendChild(button("Start", "start-model", () => control("start", { model: m.name })));
      actions.appendChild(button("Results", "show-results", () => { $("results-model").value = m.name; loadResults(); $("results-section").scrollIntoView(); }));
    }
  }

  let busy = false; // a start/stop/switch in flight: the child is going away, do not ask it
  async function control(action, body) {
    busy = true;
    try { await post(`${src.api}/serve/${action}`, body || {}); actionError(""); } catch (e) { actionError(e.message); }
    busy = false;
    tick();
    refreshRegistry(); // a model started without a profile now has its default one
  }

  // ---- add a model: a path on the manager's host is registered; anything else is pulled as a
  // job (`kvspill pull`'s forms: org/name, org/name:TAG, org/name/file.gguf) whose progress shows.
  const isPath = (text) => /^([\/~.]|[A-Za-z]:\\)/.test(text);
  async function addModel(form) {
    const source = form.source.value.trim();
    try {
      if (isPath(source)) {
        await post(src.api + "/models", form.name.value.trim() ? { source, name: form.name.value.trim() } : { source });
        actionError(""); form.reset(); refreshRegistry();
        return;
      }
      const job = await post(src.api + "/pull", { model: source });
      actionError(""); form.reset();
      followJob(job);
    } catch (e) { actionError(e.message); }
  }
  function jobText(job) {
    const mib = (b) => (b / 2 ** 20).toFixed(1);
    const size = job.total_bytes ? `${mib(job.done_bytes)} of ${mib(job.total_bytes)} MiB` : `${mib(job.done_bytes)} MiB`;
    if (job.state === "done") return `pulled ${job.model}: registered as ${job.registered} (${size})`;
    if (job.state === "failed") return `pull of ${job.model} failed: ${job.error}`;
    return `pulling ${job.model}: ${size}`;
  }
  async function followJob(job) {
    const row = $("jobs").querySelector("tbody").insertRow(0);
    row.dataset.job = job.id;
    const text = cell(row, "");
    const bar = document.createElement("progress");
    cell(row, "").appendChild(bar);
    for (;;) {
      row.dataset.state = job.state; text.textContent = jobText(job);
      if (job.total_bytes) { bar.max = job.total_bytes; bar.value = job.done_bytes; } else bar.removeAttribute("value");
      if (job.state !== "running") break;
      await new Promise((r) => setTimeout(r, 500));
      try { job = await getJson(`${src.api}/jobs/${job.id}`); } catch (e) { text.textContent = e.message; return; }
    }
    if (job.state === "done") { bar.value = bar.max = 1; refreshRegistry(); }
  }

  // ---- servers already running on this host (the manager probes its port list)
  async function refreshServers() {
    if (!manager || !keyInput.value) return;
    let found;
    try { found = await getJson(src.api + "/servers"); } catch (e) { return; /* shown by tick */ }
    $("servers-note").textContent = `ports looked at: ${found.ports.join(", ")}`;
    const body = $("servers").querySelector("tbody");
    body.replaceChildren();
    for (const srv of found.servers) {
      const row = body.insertRow();
      row.dataset.port = String(srv.port);
      cell(row, srv.url); cell(row, srv.healthy ? "healthy" : "not ready");
      cell(row, srv.models.join(", ") || srv.note || "-");
      cell(row, srv.managed ? "this manager's server" : "");
    }
  }

  // ---- results the bench suites kept (GET /api/results): one model's history, newest first, in
  // the words `kvspill bench history` prints (the row's `headline`), and a trend of the suite's
  // headline figure (the row's `trend`) once a suite has 2+ runs with one. Read when the model
  // changes or on Reload, never polled: only a bench run adds rows.
  const VERDICTS = { true: "pass", false: "FAIL", null: "-" };
  let resultsSeq = 0;
  let trendPlot = null;
  let shownResults = [];
  const when = (t) => { const d = new Date(t * 1000), p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`; };

  // Registered models first (a `--model NAME` run records NAME's source: counted under NAME), then
  // the models only results name (paths, URLs, hub ids). Keeps the selection; else the newest run's.
  async function refreshResultsModels(listing) {
    let kept;
    try { kept = (await getJson(src.api + "/results?limit=1")).models; } catch (e) { return; /* shown by tick */ }
    const counts = new Map(kept.map((k) => [k.model, k.count]));
    const owner = new Map();
    listing.models.forEach((m) => { owner.set(m.name, m.name); if (!owner.has(m.source)) owner.set(m.source, m.name); });
    const options = listing.models.map((m) => [m.name, (counts.get(m.name) || 0) + (m.source !== m.name ? counts.get(m.source) || 0 : 0)]);
    kept.filter((k) => !owner.has(k.model)).forEach((k) => options.push([k.model, k.count]));
    const select = $("results-model");
    const newest = kept.length ? owner.get(kept[0].model) || kept[0].model : null;
    const want = options.some(([name]) => name === select.value) ? select.value : newest || (options[0] || [""])[0];
    select.replaceChildren(...options.map(([name, n]) => new Option(`${name} (${n} result${n === 1 ? "" : "s"})`, name)));
    select.value = want;
    loadResults();
  }

  async function loadResults() {
    const model = $("results-model").value;
    const seq = ++resultsSeq; // a slower answer for an earlier selection is dropped
    let rows = [];
    if (model) {
      try { rows = (await getJson(`${src.api}/results?limit=200&model=${encodeURIComponent(model)}`)).results; } catch (e) { showError(e.message); return; }
    }
    if (seq !== resultsSeq) return;
    shownResults = rows;
    const empty = $("results-empty");
    empty.hidden = rows.length > 0;
    empty.textContent = model ? `No results kept for ${model} yet: run \`kvspill bench all --model ${model}\` (each suite's summary is kept here).`
      : "No models yet: add one above, then run `kvspill bench all --model NAME`.";
    $("results").hidden = rows.length === 0;
    const body = $("results").querySelector("tbody");
    body.replaceChildren();
    for (const r of rows) {
      const row = body.insertRow();
      row.dataset.result = String(r.result_id); row.dataset.suite = r.suite;
      if (r.out_dir) row.title = r.out_dir;
      [when(r.created_at), r.suite, r.profile || "-", r.host, VERDICTS[r.passed], r.headline].forEach((v) => cell(row, v));
    }
    fillTrendSuites(rows);
  }

  // The suites with 2+ runs that measured their headline figure; the newest such run's first.
  function fillTrendSuites(rows) {
    const runs = {};
    rows.forEach((r) => { if (Object.keys(r.trend).length) runs[r.suite] = (runs[r.suite] || 0) + 1; });
    const suites = [...new Set(rows.map((r) => r.suite))].filter((s) => runs[s] >= 2);
    const select = $("results-trend-suite");
    const keep = suites.includes(select.value) ? select.value : suites[0];
    select.replaceChildren(...suites.map((s) => new Option(s, s)));
    select.hidden = suites.length < 2;
    if (keep) select.value = keep;
    drawTrend(keep);
  }

  function drawTrend(suite) {
    const figure = $("results-trend-figure"), el = $("results-trend");
    if (trendPlot) { trendPlot.destroy(); trendPlot = null; }
    const runs = shownResults.filter((r) => r.suite === suite && Object.keys(r.trend).length).reverse(); // oldest first
    figure.hidden = !suite;
    el.dataset.points = String(suite ? runs.length : 0);
    if (!suite) return;
    const labels = [...new Set(runs.flatMap((r) => Object.keys(r.trend)))];
    const colors = ["#2563eb", "#16a34a", "#dc2626", "#ca8a04", "#7c3aed", "#92400e"];
    const series = [{}].concat(labels.map((label, i) => ({ label, stroke: colors[i % colors.length], width: 1.5, spanGaps: true, points: { show: true } })));
    const data = [runs.map((r) => r.created_at)].concat(labels.map((l) => runs.map((r) => (l in r.trend ? r.trend[l] : null))));
    $("results-trend-title").textContent = `${suite}: ${labels.join(", ")} per run`;
    trendPlot = new uPlot({ width: 420, height: 160, series, axes: [{}, { size: 50 }], legend: { live: false } }, data, el);
  }

  function formFlags(form) {
    const flags = {};
    for (const [k, v] of new FormData(form).entries()) if (k !== "name" && k !== "model" && v !== "") flags[k] = v;
    return flags;
  }

  // One row per figure; on a CPU host (no CUDA GPU: plan.request.device "cpu") the "gpu" tier is
  // the KV pool in host RAM, and the budget is the available RAM, not a card's.
  const PLAN_ROWS = [
    ["fits", (p) => (p.fits ? "yes" : "no")],
    [(cpu) => (cpu ? "weights in RAM GiB" : "weights GiB"), (p) => (p.weight_bytes / GiB).toFixed(2)],
    [(cpu) => (cpu ? "KV pool tokens (RAM)" : "GPU KV tokens"), (p) => p.gpu_kv_tokens],
    ["CPU KV tokens", (p) => p.cpu_kv_tokens],
    ["disk KV tokens", (p) => p.disk_kv_tokens],
    ["max context", (p) => p.max_context],
    ["TTFT s", (p) => (p.ttft_s === null ? "-" : p.ttft_s.toFixed(2))],
    ["decode tok/s", (p) => (p.decode_tok_s === null ? "-" : p.decode_tok_s.toFixed(1))],
    ["TTFT and decode from", (p) => p.figure_source || "-"],
  ];
  function planBudget(plan) {
    const gib = (plan.vram_budget_bytes / GiB).toFixed(1);
    if (plan.plans.yours.request.device === "cpu") return `no CUDA GPU: the engine on the CPU, its KV pool in RAM (${gib} GiB available)`;
    return `VRAM budget ${gib} GiB`;
  }
  async function showPlan(query) {
    const out = $("plan");
    let plan;
    try { plan = await post(src.api + "/plan", query); } catch (e) { out.textContent = "plan: " + e.message; return; }
    const names = Object.keys(plan.plans);
    const cpu = plan.plans.yours.request.device === "cpu";
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    ["", ...names].forEach((n) => cell(head, n));
    for (const [label, f] of PLAN_ROWS) {
      const row = table.insertRow();
      cell(row, typeof label === "function" ? label(cpu) : label);
      names.forEach((n) => cell(row, f(plan.plans[n])));
    }
    const caption = document.createElement("p");
    caption.textContent = `${plan.model}: context ${plan.context_len}, ${planBudget(plan)}; ` + plan.notes.concat(plan.plans.yours.advice || []).join("; ");
    out.replaceChildren(caption, table);
    out.dataset.fits = String(plan.fits);
  }

  if (manager) {
    const form = $("profile-form");
    $("show-plan").addEventListener("click", () => showPlan({ model: form.model.value, flags: formFlags(form) }));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await post(src.api + "/profiles", { name: form.name.value, model: form.model.value, flags: formFlags(form) });
        actionError("");
        refreshRegistry();
      } catch (e) { actionError(e.message); }
    });
    $("stop").addEventListener("click", () => control("stop"));
    $("restart").addEventListener("click", () => control("restart"));
    $("add-model-form").addEventListener("submit", (event) => { event.preventDefault(); addModel(event.target); });
    $("results-model").addEventListener("change", loadResults);
    $("results-reload").addEventListener("click", refreshRegistry); // new models and new runs both
    $("results-trend-suite").addEventListener("change", (event) => drawTrend(event.target.value));
    refreshServers();
    setInterval(refreshServers, 5000);
  }

  // ---- the server's log: the manager's capture of its child, or the server's own ring (/logs)
  async function refreshLogs() {
    if (manager && !keyInput.value) return;
    try {
      const logs = $("logs");
      const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
      logs.textContent = (await getJson(src.logs)).lines.join("\n");
      if (atEnd) logs.scrollTop = logs.scrollHeight; // follow the tail unless the user scrolled up
    } catch (e) { /* shown by tick */ }
  }
  refreshLogs();
  setInterval(refreshLogs, 2000);

  // ---- chat: streamed (SSE) on whatever model is served now. Waiting (until the first token),
  // then streaming, then done, stopped or error: the phases are kept in #chat-log's data-phases.
  // Stop aborts the fetch; the server sees its client gone and aborts the request.
  const history = [];
  let controller = null;
  function say(role, text) {
    const p = document.createElement("p");
    p.className = role; p.textContent = (role === "user" ? "you: " : "") + text;
    $("chat-log").appendChild(p);
    $("chat-log").scrollTop = $("chat-log").scrollHeight;
    return p;
  }
  function phase(name, text) {
    const log = $("chat-log");
    log.dataset.phases = (log.dataset.phases ? log.dataset.phases + "," : "") + name;
    $("chat-status").textContent = text;
    $("chat-status").className = "note " + name;
    const active = name === "waiting" || name === "streaming";
    $("chat-send").disabled = active; $("chat-stop").disabled = !active;
  }
  // The SSE body as chat deltas: `data: {json}` events, `data: [DONE]` at the end.
  async function* deltas(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end); buffer = buffer.slice(end + 2);
        const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("");
        if (data === "[DONE]") return;
        if (!data) continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const choice = chunk.choices && chunk.choices[0];
        if (choice && choice.delta && choice.delta.content) yield choice.delta.content;
      }
    }
  }
  async function streamReply(model, answer) {
    const headers = { "Content-Type": "application/json" };
    if (keyInput.value) headers.Authorization = "Bearer " + keyInput.value;
    const max_tokens = Number($("chat-max-tokens").value) || 256;
    const body = JSON.stringify({ model, messages: history, max_tokens, stream: true });
    const response = await fetch(src.chat, { method: "POST", headers, body, signal: controller.signal });
    if (!response.ok) {
      let message = await response.text();
      try { message = JSON.parse(message).error.message; } catch (e) { /* not JSON: the text */ }
      throw new Error(message || response.statusText);
    }
    for await (const piece of deltas(response)) {
      if (!answer.textContent) phase("streaming", "generating… (Stop ends it)");
      answer.textContent += piece;
      $("chat-log").scrollTop = $("chat-log").scrollHeight;
    }
  }
  $("chat-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("chat-input").value.trim();
    if (!text || controller) return;
    $("chat-input").value = "";
    history.push({ role: "user", content: text });
    say("user", text);
    const answer = say("assistant", "");
    controller = new AbortController();
    phase("waiting", "waiting for the model…");
    try {
      const model = (await getJson(src.models)).data[0].id;
      await streamReply(model, answer);
      phase("done", "");
    } catch (e) {
      if (e.name === "AbortError") {
        answer.dataset.stopped = "1";
        phase("stopped", "stopped");
      } else {
        answer.remove();
        history.pop();
        say("error", "error: " + e.message);
        phase("error", "");
      }
    }
    if (answer.isConnected && answer.textContent) history.push({ role: "assistant", content: answer.textContent });
    else if (answer.isConnected) history.pop(); // stopped before a token: the question goes unanswered
    controller = null;
  });
  $("chat-stop").addEventListener("click", () => { if (controller) controller.abort(); });

  refreshRegistry();
  tick();
  setInterval(tick, 1000);
})();
