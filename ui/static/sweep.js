// One sweep: summary tiles, throughput-vs-memory plot with the Pareto front and the ceiling,
// the best config (download, train), parallel coordinates and a sortable trial table.
"use strict";
(() => {
  const { api, el, bytes, gib, rate, num, when, duration, pill, empty, banner, download } = Elastune;
  const body = document.getElementById("sweep-body");
  const sweepId = body.dataset.sweepId;
  const COLORS = { ok: "#2457a6", pruned: "#a86400", infeasible: "#5a4fb0", oom: "#b3261e", failed: "#7b8494", running: "#1b8a9a" };
  let data = null, sort = { key: "number", dir: 1 }, selected = null, laidOut = false, lastJson = "";

  const tile = (label, value, unit) => el("div", { class: "tile" }, el("div", { class: "label", text: label }), el("div", { class: "value" }, value, unit ? el("span", { class: "unit", text: ` ${unit}` }) : null));
  const paramText = (v) => (v === null || v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v));

  function header() {
    document.getElementById("sweep-title").textContent = data.name;
    document.title = `${data.name} · elastune`;
    const st = document.getElementById("sweep-status"); st.replaceWith(Object.assign(pill(data.status), { id: "sweep-status" }));
    document.getElementById("sweep-sub").textContent = `${data.sweep_id} · started ${when(data.started_at)} · ${data.status === "running" ? "running for" : "took"} ${duration(data.started_at, data.ended_at)}${data.description ? " · " + data.description : ""}`;
    const link = document.getElementById("mlflow-link");
    if (data.mlflow_url) { link.href = data.mlflow_url; link.hidden = false; }
    else if (data.mlflow_run_id) document.getElementById("sweep-sub").textContent += ` · MLflow run ${data.mlflow_run_id}`;
    const c = data.counts;
    document.getElementById("tiles").replaceChildren(
      tile("Trials", String(data.trial_count)),
      tile("Finished", String(c.ok)),
      tile("Ruled out before running", String(c.infeasible)),
      tile("Out of memory", String(c.oom)),
      tile("Stopped early / failed", `${c.pruned} / ${c.failed}`),
      tile("Best throughput", rate(data.best_samples_per_s), "samples/s"),
      ...(data.units ? [tile(`Best ${data.units} throughput`, rate(data.best_units_per_s), `${data.units}/s`)] : []),
      tile("Memory ceiling", data.memory_ceiling_bytes ? bytes(data.memory_ceiling_bytes) : "none"));
  }

  function trialTip(t) {
    return [`${t.number < 0 ? "reference run" : `trial ${t.number}`} (${t.trial_id}) · ${Elastune.STATUS_WORDS[t.status] || t.status}${t.pareto ? " · Pareto" : ""}${t.best ? " · best" : ""}`,
      `${rate(t.samples_per_s)} samples/s${t.units ? ` (${rate(t.units_per_s)} ${t.units}/s)` : ""} · peak ${bytes(t.peak_memory_bytes)} measured, ${bytes(t.estimated_peak_bytes)} predicted`,
      ...Object.entries(t.params).map(([k, v]) => `${k} = ${paramText(v)}`)];
  }

  function plot() {
    const box = document.getElementById("scatter");
    // Every trial with a throughput is a dot, at plot_peak_bytes: its measured peak, or (a trial
    // ASHA stopped before its peak was read) its predicted one, drawn hollow.
    const ran = data.trials.filter((t) => t.samples_per_s !== null && t.plot_peak_bytes !== null);
    const predicted = ran.some((t) => t.plot_peak_source === "predicted");
    const notRun = data.trials.filter((t) => !ran.includes(t) && t.estimated_peak_bytes !== null && ["infeasible", "oom", "failed"].includes(t.status));
    if (!ran.length && !notRun.length) { box.replaceChildren(empty("Nothing to plot yet", "Points appear as trials finish.")); return; }
    Charts.scatter(box, {
      label: "samples per second against peak memory",
      xTitle: predicted ? "peak memory (GiB): measured; hollow dots: predicted" : "peak memory, measured (GiB)", yTitle: "throughput (samples/s)",
      xFmt: (v) => String(+v.toFixed(2)),
      ceiling: gib(data.memory_ceiling_bytes), ceilingLabel: data.memory_ceiling_bytes ? `ceiling ${bytes(data.memory_ceiling_bytes)}` : null,
      points: ran.map((t) => ({ id: t.trial_id, x: gib(t.plot_peak_bytes), y: t.samples_per_s, color: COLORS[t.status] || "#555", ring: t.pareto, hollow: t.plot_peak_source === "predicted", r: t.best ? 8 : t.pareto ? 6 : 4.5, tip: trialTip(t) })),
      strip: notRun.map((t) => ({ id: t.trial_id, x: gib(t.estimated_peak_bytes), color: COLORS[t.status], tip: trialTip(t) })),
      front: ran.filter((t) => t.pareto).map((t) => ({ x: gib(t.peak_memory_bytes), y: t.samples_per_s })),
      onClick: (id) => selectTrial(id, true),
      legend: [
        { label: "finished", color: COLORS.ok }, { label: "stopped early", color: COLORS.pruned },
        ...(predicted ? [{ label: "stopped before its peak was measured: at its predicted peak", color: COLORS.pruned, shape: "hollow" }] : []),
        { label: "Pareto front", color: "#2457a6", shape: "line" },
        { label: "ruled out: predicted over the ceiling", color: COLORS.infeasible, shape: "cross" },
        { label: "out of memory", color: COLORS.oom, shape: "cross" },
        ...(data.memory_ceiling_bytes ? [{ label: "memory ceiling", color: "#b3261e", shape: "dash" }] : []),
      ],
    });
  }

  function best() {
    const box = document.getElementById("best");
    const b = data.best;
    if (!b) { box.replaceChildren(empty("No best configuration yet", "A trial must finish inside the memory ceiling and the quality tolerance.")); return; }
    const kv = el("dl", { class: "kv" });
    const add = (k, v) => kv.append(el("dt", { text: k }), el("dd", { text: v }));
    add("trial", `${b.number} (${b.trial_id})`);
    add("throughput", `${rate(b.samples_per_s)} samples/s${b.units ? ` · ${rate(b.units_per_s)} ${b.units}/s` : ""}`);
    if (b.confirmed_speedup) add("confirmed", `${b.confirmed_speedup[1].toFixed(2)}× the reference (rounds ${b.confirmed_speedup[0].toFixed(2)}–${b.confirmed_speedup[2].toFixed(2)}×), measured interleaved after the search`);
    add("peak memory", `${bytes(b.peak_memory_bytes)} measured (${b.peak_memory_kind || "?"}), ${bytes(b.estimated_peak_bytes)} predicted`);
    add(`eval ${data.quality_metric} (quality)`, num(b.quality));
    for (const [k, v] of Object.entries(b.metrics || {})) if (k !== data.quality_metric) add(`eval ${k}`, num(v));
    for (const [k, v] of Object.entries(b.params)) add(k, paramText(v));
    const train = el("button", { type: "button", class: "primary", id: "train-best", onclick: trainBest }, "Train this");
    const dl = el("button", { type: "button", id: "download-best", onclick: () => download(`/api/sweeps/${encodeURIComponent(sweepId)}/best-config.yaml`, `${sweepId}-best.yaml`, "application/yaml").catch((e) => banner(e.message)) }, "Download config (YAML)");
    const links = b.mlflow_url ? el("p", { class: "small" }, el("a", { href: b.mlflow_url, target: "_blank", rel: "noopener", text: "This trial in MLflow" }))
      : el("p", { class: "small muted", text: `MLflow run ${b.mlflow_run_id || "–"} (a SQLite store has no web page; browse it with \`mlflow ui --backend-store-uri ${data.tracking_uri || "URI"}\`).` });
    box.replaceChildren(...[kv, el("div", { class: "actions" }, train, dl), links].filter(Boolean),
      el("p", { class: "small muted", text: "Train this launches a training run of this config on the cluster and opens it on the Jobs page." }));
  }

  async function trainBest() {
    try {
      const job = await api.post("/api/jobs", { kind: "train", from_sweep: sweepId, sets: [] });
      location.href = `/jobs#job=${encodeURIComponent(job.job_id)}`;
    } catch (e) {
      banner(e.problems && e.problems.length ? e.problems.map((p) => `${p.field}: ${p.message}`).join(" · ") : e.message);
    }
  }

  function parcoords() {
    const box = document.getElementById("parcoords");
    const rows = data.trials.filter((t) => t.samples_per_s !== null && t.plot_peak_bytes !== null);
    const predicted = rows.some((t) => t.plot_peak_source === "predicted");
    if (!rows.length || !data.parameters.length) { box.replaceChildren(empty("No finished trials yet", "Lines appear as trials report throughput.")); return; }
    // A numeric axis only where every line has a number: a trial without the parameter (the
    // reference's "(base)") makes it an axis of values instead.
    const isNum = (k) => rows.every((t) => typeof t.params[k] === "number");
    const dims = [
      ...data.parameters.map((k) => ({ key: k, label: k, numeric: isNum(k) })),
      { key: "__peak", label: "peak memory (GiB)", numeric: true, floor: 0, fmt: (v) => v.toFixed(2) },
      { key: "__sps", label: "samples/s", numeric: true, floor: 0, fmt: (v) => Math.round(v).toLocaleString("en-US") },
    ];
    Charts.parcoords(box, {
      dims,
      rows: rows.map((t) => ({ id: t.trial_id, color: t.best ? "#d1731f" : COLORS[t.status] || "#555", tip: trialTip(t), dashed: t.plot_peak_source === "predicted",
        values: { ...Object.fromEntries(data.parameters.map((k) => [k, t.params[k] === undefined ? "(base)" : t.params[k]])), __peak: gib(t.plot_peak_bytes), __sps: t.samples_per_s } })),
      legend: [{ label: "finished", color: COLORS.ok }, { label: "stopped early", color: COLORS.pruned }, { label: "best", color: "#d1731f" },
        ...(predicted ? [{ label: "dashed: peak memory predicted, not measured", color: "#5b6576", shape: "dash" }] : [])],
    });
  }

  // A figure with its spread on a second, smaller line: the columns stay narrow.
  const withSub = (main, sub, title) => [main, el("span", { class: "sub small muted", text: sub, title })];
  // One cell holds every searched parameter, one per line: a column each ran off the page's right edge.
  const paramsCell = (t) => {
    const pairs = data.parameters.filter((k) => t.params[k] !== undefined)
      .flatMap((k) => [el("span", { class: "k muted", text: k }), el("span", { class: "v", text: paramText(t.params[k]) })]);
    return [pairs.length ? el("div", { class: "kvs" }, pairs) : el("span", { class: "muted", text: t.number < 0 ? "the spec's base config" : "–" })];
  };
  // Sorting by the parameters orders by the first, then the next...: numbers as numbers, missing last.
  const byParams = (a, b) => {
    for (const k of data.parameters) {
      const va = a.params[k], vb = b.params[k];
      if (va === vb) continue;
      if (va === undefined || va === null) return 1;
      if (vb === undefined || vb === null) return -1;
      const d = typeof va === "number" && typeof vb === "number" ? va - vb : paramText(va).localeCompare(paramText(vb));
      if (d) return d;
    }
    return 0;
  };

  const COLUMNS = [
    { key: "number", label: "#", num: true, cell: (t) => (t.number < 0 ? "reference" : String(t.number)) },
    { key: "status", label: "Status", cell: (t) => [pill(t.status), t.best ? pill("best", "best") : null, t.pareto ? el("span", { class: "small muted", text: " Pareto" }) : null] },
    { key: "samples_per_s", label: "Samples/s", num: true, cell: (t) => (t.samples_per_s_quartiles && t.windows >= 3
      ? withSub(rate(t.samples_per_s), `${rate(t.samples_per_s_quartiles[0])}–${rate(t.samples_per_s_quartiles[2])}`, "middle half of the trial's timed windows")
      : rate(t.samples_per_s)) },
    { key: "units_per_s", label: "Units/s", num: true, cell: (t) => rate(t.units_per_s) },
    { key: "confirmed_speedup", label: "Confirmed ×ref", num: true, get: (t) => (t.confirmed_speedup ? t.confirmed_speedup[1] : null),
      cell: (t) => (t.confirmed_speedup ? withSub(`${t.confirmed_speedup[1].toFixed(2)}×`, `${t.confirmed_speedup[0].toFixed(2)}–${t.confirmed_speedup[2].toFixed(2)}`, "lowest and highest of the confirmation rounds") : "") },
    { key: "peak_memory_bytes", label: "Peak memory, measured", num: true, cell: (t) => bytes(t.peak_memory_bytes) },
    { key: "estimated_peak_bytes", label: "Peak memory, predicted", num: true, cell: (t) => bytes(t.estimated_peak_bytes) },
    { key: "quality", label: "Eval quality", num: true, cell: (t) => num(t.quality) },
    { key: "oom_retries", label: "OOM retries", num: true },
  ];

  function table() {
    // The quality column is named by the workload's metric, then a column per other eval metric the
    // workload reports (a click model's AUC, a classifier's F1); a units column (an LM's real
    // tokens/s) only for workloads that count them.
    const named = COLUMNS.filter((c) => c.key !== "units_per_s" || data.units)
      .filter((c) => c.key !== "confirmed_speedup" || data.trials.some((t) => t.confirmed_speedup))
      .map((c) => (c.key === "quality" ? { ...c, label: `Eval ${data.quality_metric}` }
        : c.key === "units_per_s" ? { ...c, label: `${data.units[0].toUpperCase()}${data.units.slice(1)}/s` } : c));
    const others = [...new Set(data.trials.flatMap((t) => Object.keys(t.metrics || {})))]
      .filter((name) => name !== data.quality_metric).sort()
      .map((name) => ({ key: `metric.${name}`, label: `Eval ${name}`, num: true,
        get: (t) => (t.metrics ? t.metrics[name] : null), cell: (t) => num(t.metrics ? t.metrics[name] : null) }));
    const oom = named.findIndex((c) => c.key === "oom_retries");
    named.splice(oom, 0, ...others);
    const cols = [...named,
      ...(data.parameters.length ? [{ key: "params", label: "Parameters", cls: "params", cmp: byParams, cell: paramsCell }] : []),
      { key: "error", label: "Note", cls: "note", cell: (t) => (t.error ? el("span", { text: t.error.split("\n")[0].slice(0, 160), title: t.error }) : "") }];
    const value = (t, c) => (c.get ? c.get(t) : t[c.key]);
    const trials = [...data.trials].sort((a, b) => {
      const c = cols.find((x) => x.key === sort.key) || cols[0];
      if (c.cmp) return c.cmp(a, b) * sort.dir || a.number - b.number;
      const va = value(a, c), vb = value(b, c);
      if (va === vb) return a.number - b.number;
      if (va === null || va === undefined) return 1;
      if (vb === null || vb === undefined) return -1;
      return (va < vb ? -1 : 1) * sort.dir;
    });
    const tableEl = document.getElementById("trial-table");
    if (!trials.length) { tableEl.replaceChildren(el("tbody", {}, el("tr", {}, el("td", {}, empty("No trials yet", "Trials appear here as the sweep proposes them."))))); return; }
    const head = el("tr", {}, cols.map((c) => el("th", {
      class: `sortable ${c.num ? "num" : ""} ${c.cls || ""} ${sort.key === c.key ? (sort.dir > 0 ? "sorted-asc" : "sorted-desc") : ""}`, "data-key": c.key, text: c.label,
      onclick: () => { sort = { key: c.key, dir: sort.key === c.key ? -sort.dir : c.num ? -1 : 1 }; table(); },
    })));
    const rows = trials.map((t) => el("tr", { "data-trial": t.trial_id, class: t.trial_id === selected ? "selected" : "", onclick: () => selectTrial(t.trial_id, false) },
      cols.map((c) => { const v = c.cell ? c.cell(t) : value(t, c); return el("td", { class: `${c.num ? "num" : ""} ${c.cls || ""}`.trim() || null }, ...(Array.isArray(v) ? v : [v === null || v === undefined ? "–" : v])); })));
    tableEl.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
  }

  function selectTrial(id, scroll) {
    selected = id;
    document.querySelectorAll("#trial-table tr[data-trial]").forEach((r) => r.classList.toggle("selected", r.dataset.trial === id));
    const row = document.querySelector(`#trial-table tr[data-trial="${CSS.escape(id)}"]`);
    if (row && scroll) row.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  async function refresh() {
    let fresh;
    try { fresh = await api.get(`/api/sweeps/${encodeURIComponent(sweepId)}`); }
    catch (e) {
      if (e.status === 404) { body.replaceChildren(empty("No such sweep", `${e.message} Go back to the sweep list to pick one.`)); return false; }
      banner(e.message); return true;
    }
    banner(null);
    const json = JSON.stringify(fresh);
    if (json !== lastJson) {
      lastJson = json; data = fresh;
      if (!laidOut) {
        body.replaceChildren(document.getElementById("sweep-layout").content.cloneNode(true));
        document.getElementById("csv-button").addEventListener("click", () => download(`/api/sweeps/${encodeURIComponent(sweepId)}/trials.csv`, `${sweepId}-trials.csv`, "text/csv").catch((e) => banner(e.message)));
        laidOut = true;
      }
      header(); plot(); best(); parcoords(); table();
    }
    return data.status === "running";
  }

  (async function loop() {
    const again = await refresh();
    if (again) setTimeout(loop, 4000);
  })();
})();
