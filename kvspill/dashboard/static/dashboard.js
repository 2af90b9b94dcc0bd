// kvspill dashboard: polls its host once a second and draws uPlot charts. No build step.
// The page's config (#config) says where each kind of data lives: the manager's /api routes,
// or, read-only under `kvspill serve` at /ui, the server's own /v1/kv and /metrics.
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
        $("gpu-note").textContent = gpu ? gpu.name : "no GPU: " + system.gpu.reason;
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
    const total = gpu ? budget || gpu.total_bytes : null;
    charts.vram.push(gpu ? [gpu.used_bytes / GiB, total / GiB, 0.85 * total / GiB, 0.9 * total / GiB, 0.95 * total / GiB] : [null, null, null, null, null]);
    charts.gpu.push(gpu ? [gpu.utilization_percent, gpu.temperature_c, gpu.power_w] : [null, null, null]);
    const tiers = kv ? kv.tiers : null;
    charts.host.push([host ? host.ram_used_bytes / GiB : null, host && host.pinned_bytes !== null ? host.pinned_bytes / GiB : null, tiers ? tiers.disk.used_bytes / GiB : null]);
    charts.kv.push(tiers ? [tiers.gpu.used_blocks, tiers.cpu.used_blocks, tiers.disk.used_blocks] : [null, null, null]);
    const [tokPerS, ttft, itl] = metrics ? rates(now, metrics) : [null, null, null];
    charts.requests.push(metrics ? [metrics["kvspill:num_requests_running"], metrics["kvspill:num_requests_waiting"], tokPerS] : [null, null, null]);
    charts.latency.push([ttft, itl]);
    renderRequests(kv);
  }

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
    const body = $("registry").querySelector("tbody");
    body.replaceChildren();
    for (const p of listing.profiles) {
      const row = body.insertRow();
      row.dataset.profile = p.name;
      cell(row, p.name); cell(row, p.model_name);
      cell(row, Object.entries(p.flags).map(([k, v]) => `${k}=${v}`).join(" ") || "(defaults)");
      const actions = cell(row, "");
      for (const [label, fn] of [["Plan", () => showPlan({ profile: p.name })], ["Start", () => control("start", p.name)], ["Switch", () => control("switch", p.name)]]) {
        const b = document.createElement("button");
        b.type = "button"; b.textContent = label; b.className = label.toLowerCase();
        b.addEventListener("click", fn);
        actions.appendChild(b);
      }
    }
  }

  let busy = false; // a start/stop/switch in flight: the child is going away, do not ask it
  async function control(action, profile) {
    busy = true;
    try { await post(`${src.api}/serve/${action}`, profile ? { profile } : {}); showError(""); } catch (e) { showError(e.message); }
    busy = false;
    tick();
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
        showError("");
        refreshRegistry();
      } catch (e) { showError(e.message); }
    });
    $("stop").addEventListener("click", () => control("stop"));
    $("restart").addEventListener("click", () => control("restart"));
    setInterval(async () => {
      if (!keyInput.value) return;
      try {
        const logs = $("logs");
        const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
        logs.textContent = (await getJson(src.api + "/logs?lines=200")).lines.join("\n");
        if (atEnd) logs.scrollTop = logs.scrollHeight; // follow the tail unless the user scrolled up
      } catch (e) { /* shown by tick */ }
    }, 2000);
  }

  // ---- chat: one non-streaming completion per message, on whatever model is served now
  const history = [];
  function say(role, text) {
    const p = document.createElement("p");
    p.className = role; p.textContent = (role === "user" ? "you: " : "") + text;
    $("chat-log").appendChild(p);
    $("chat-log").scrollTop = $("chat-log").scrollHeight;
  }
  $("chat-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("chat-input").value.trim();
    if (!text) return;
    $("chat-input").value = "";
    history.push({ role: "user", content: text });
    say("user", text);
    try {
      const model = (await getJson(src.models)).data[0].id;
      const reply = await post(src.chat, { model, messages: history, max_tokens: 48, temperature: 0 });
      const answer = reply.choices[0].message.content;
      history.push({ role: "assistant", content: answer });
      say("assistant", answer);
    } catch (e) {
      history.pop();
      say("error", "error: " + e.message);
    }
  });

  refreshRegistry();
  tick();
  setInterval(tick, 1000);
})();
