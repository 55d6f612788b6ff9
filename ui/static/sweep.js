// One sweep: summary tiles, throughput-vs-memory plot with the Pareto front and the ceiling,
// the best config (download, train), parallel coordinates and a sortable trial table.
"use strict";
(() => {
  const { api, el, bytes, gib, rate, num, when, duration, pill, empty, banner, download } = Elastune;
  const body = document.getElementById("sweep-body");
  const sweepId = body.dataset.sweepId;
  const COLORS = { ok: "#2457a6", pruned: "#a86400", infeasible: "#5a4fb0", oom: "#b3261e", failed: "#7b8494", running: "#1b8a9a" };
  let data = null, sort = { key: "rank", dir: 1 }, selected = null, laidOut = false, lastJson = "";

  const tile = (label, value, unit) => el("div", { class: "tile" }, el("div", { class: "label", text: label }), el("div", { class: "value" }, value, unit ? el("span", { class: "unit", text: ` ${unit}` }) : null));
  const paramText = (v) => (v === null || v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v));
  // A searched value as the server wrote it for showing (floats to three significant digits).
  const shown = (t, k) => (t.params_shown && k in t.params_shown ? t.params_shown[k] : paramText(t.params[k]));
  const who = (t) => (t.number < 0 ? "the reference" : `trial ${t.number}`);
  const times = (x) => `${x.toFixed(2)}×`;
  // The confirmed ratio with what stands under it: the lowest–highest round, or why there is no range.
  const confirmedNote = (t) => (t.same_as_reference ? "its config is the reference's" : !t.confirmed_speedup ? ""
    : t.number < 0 ? "1 by definition" : t.confirmed_range ? `${t.confirmed_speedup[0].toFixed(2)}–${t.confirmed_speedup[2].toFixed(2)}`
    : t.confirmed_rounds === 1 ? "one round: no range" : "");

  // The headline names the figure that ranks (the confirmed ratio where the confirmation ran) and
  // the trial it belongs to: the table's row #1.
  function bestTile() {
    const b = data.best;
    if (!b) return tile("Best", "–");
    if (data.ranked_by === "confirmed" && b.confirmed_speedup) {
      return tile(`Best: ${who(b)} · ranked by confirmed ×ref`, times(b.confirmed_speedup[1]), "ref");
    }
    return tile(`Best: ${who(b)} · ranked by measured samples/s`, rate(b.samples_per_s), "samples/s");
  }

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
      bestTile(),
      ...(data.units && data.best ? [tile(`${who(data.best)}: ${data.units}, measured`, rate(data.best_units_per_s), `${data.units}/s`)] : []),
      tile("Memory ceiling", data.memory_ceiling_bytes ? bytes(data.memory_ceiling_bytes) : "none"));
  }

  function trialTip(t) {
    return [`${t.number < 0 ? "reference run" : `trial ${t.number}`} (${t.trial_id}) · ${Elastune.STATUS_WORDS[t.status] || t.status}${t.pareto ? " · Pareto" : ""}${t.best ? " · best" : ""}`,
      `${rate(t.samples_per_s)} samples/s${t.running_mean ? " (running mean)" : ""}${t.units ? ` (${rate(t.units_per_s)} ${t.units}/s)` : ""} · peak ${bytes(t.peak_memory_bytes)} measured, ${bytes(t.estimated_peak_bytes)} predicted`,
      ...(t.confirmed_speedup && !t.same_as_reference ? [`confirmed ${times(t.confirmed_speedup[1])} the reference`] : []),
      ...Object.keys(t.params).map((k) => `${k} = ${shown(t, k)}`)];
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
    const finished = data.status === "finished";
    document.querySelector("#best-card h2").textContent = finished ? "Best configuration" : "Best configuration so far";
    // A sweep that has not finished has no best_config.yaml yet: what to do instead (resume it, or wait).
    const step = !finished && data.next_step ? el("p", { class: "small", id: "next-step" },
      data.next_step.said, data.next_step.command ? [" ", el("code", { text: data.next_step.command })] : null) : null;
    if (!b) { box.replaceChildren(...[empty("No best configuration yet", "A trial must finish inside the memory ceiling and the quality tolerance."), step].filter(Boolean)); return; }
    const kv = el("dl", { class: "kv" });
    const add = (k, v) => kv.append(el("dt", { text: k }), el("dd", { text: v }));
    add("trial", `${b.number} (${b.trial_id})`);
    add("ranked by", data.ranked_by === "confirmed" ? "its confirmed ratio to the reference" : "its measured samples/s (no confirmation ran)");
    add("measured", `${rate(b.samples_per_s)} samples/s${b.measured_speedup !== null ? ` (${times(b.measured_speedup)} the reference)` : ""}${b.units ? ` · ${rate(b.units_per_s)} ${b.units}/s` : ""}, the search's single run`);
    if (b.confirmed_speedup) add("confirmed", b.number < 0 ? "the reference itself: no config was faster in the rounds"
      : `${times(b.confirmed_speedup[1])} the reference${b.confirmed_range ? ` (rounds ${b.confirmed_speedup[0].toFixed(2)}–${b.confirmed_speedup[2].toFixed(2)}×)` : b.confirmed_rounds === 1 ? " (one round: no range)" : ""}, median of runs one at a time after the search, each ÷ the reference's run just before it`);
    if (data.tied_with_best.length > 1) add("tie", `${data.tied_with_best.length} configs' confirmed ranges overlap: not told apart on this machine; this one has the lowest peak memory`);
    add("peak memory", `${bytes(b.peak_memory_bytes)} measured (${b.peak_memory_kind || "?"}), ${bytes(b.estimated_peak_bytes)} predicted`);
    add(`eval ${data.quality_metric} (quality)`, `${num(b.quality)}${b.quality_change ? ` (${b.quality_change} than the reference's)` : ""}`);
    for (const [k, v] of Object.entries(b.metrics || {})) if (k !== data.quality_metric) add(`eval ${k}`, num(v));
    for (const k of Object.keys(b.params)) add(k, shown(b, k));
    const train = el("button", { type: "button", class: "primary", id: "train-best", onclick: trainBest }, "Train this");
    const dl = el("button", { type: "button", id: "download-best", onclick: () => download(`/api/sweeps/${encodeURIComponent(sweepId)}/best-config.yaml`, `${sweepId}-best.yaml`, "application/yaml").catch((e) => banner(e.message)) }, finished ? "Download config (YAML)" : "Download the best so far (YAML)");
    const links = b.mlflow_url ? el("p", { class: "small" }, el("a", { href: b.mlflow_url, target: "_blank", rel: "noopener", text: "This trial in MLflow" }))
      : el("p", { class: "small muted", text: `MLflow run ${b.mlflow_run_id || "–"} (a SQLite store has no web page; browse it with \`mlflow ui --backend-store-uri ${data.tracking_uri || "URI"}\`).` });
    box.replaceChildren(...[kv, step, el("div", { class: "actions" }, train, dl), links].filter(Boolean),
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
  const sub = (text, title) => el("span", { class: "sub small muted", text, title });
  const withSub = (main, text, title) => [main, sub(text, title)];
  // One cell holds every searched parameter, one per line: a column each ran off the page's right edge.
  const paramsCell = (t) => {
    const pairs = data.parameters.filter((k) => t.params[k] !== undefined)
      .flatMap((k) => [el("span", { class: "k muted", text: k }), el("span", { class: "v", text: shown(t, k) })]);
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
    // The rank (what the sweep crowns is #1), and under it which trial: the trial number, or the reference.
    { key: "rank", label: "Rank", num: true, cmp: (a, b) => (a.rank ?? Infinity) - (b.rank ?? Infinity) || a.number - b.number,
      cell: (t) => withSub(t.rank === null ? "–" : String(t.rank), `${t.number < 0 ? "reference" : `trial ${t.number}`}${t.tie ? " · tie" : ""}`,
        t.tie ? "its confirmed range overlaps the best's: not told apart on this machine; lower peak memory ranks first" : undefined) },
    { key: "status", label: "Status", cell: (t) => [pill(t.status), t.best ? pill("best", "best") : null, t.pareto ? el("span", { class: "small muted", text: " Pareto" }) : null] },
    // The search's single run: its samples/s, how it spread (or that it is a running mean), its ratio to the reference's.
    { key: "samples_per_s", label: "Measured samples/s", num: true, cell: (t) => [rate(t.samples_per_s),
      t.running_mean && t.samples_per_s ? sub("running mean", "stopped early: the mean of the steps it ran, not a steady rate")
        : t.samples_per_s_quartiles && t.windows >= 3 ? sub(`${rate(t.samples_per_s_quartiles[0])}–${rate(t.samples_per_s_quartiles[2])}`, "middle half of the trial's timed windows") : null,
      t.measured_speedup !== null ? sub(`${times(t.measured_speedup)} ref`, "the search's single run ÷ the reference's") : null] },
    { key: "units_per_s", label: "Units/s", num: true, cell: (t) => rate(t.units_per_s) },
    { key: "confirmed_speedup", label: "Confirmed ×ref", num: true, get: (t) => (t.confirmed_speedup && !t.same_as_reference ? t.confirmed_speedup[1] : null),
      cell: (t) => (t.same_as_reference ? withSub("= ref", confirmedNote(t)) : t.confirmed_speedup ? withSub(times(t.confirmed_speedup[1]), confirmedNote(t), "lowest and highest of the confirmation rounds") : "") },
    { key: "peak_memory_bytes", label: "Peak memory, measured", num: true, cell: (t) => bytes(t.peak_memory_bytes) },
    { key: "estimated_peak_bytes", label: "Peak memory, predicted", num: true, cell: (t) => bytes(t.estimated_peak_bytes) },
    { key: "quality", label: "Eval quality", num: true, cell: (t) => (t.quality_change ? withSub(num(t.quality), `${t.quality_better === false ? "▼" : t.quality_better ? "▲" : ""} ${t.quality_change}`.trim(), "against the reference's, in the metric's direction") : num(t.quality)) },
    { key: "oom_retries", label: "OOM retries", num: true },
  ];

  function table() {
    // The quality column is named by the workload's metric, then a column per other eval metric the
    // workload reports (a click model's AUC, a classifier's F1); a units column (an LM's real
    // tokens/s) only for workloads that count them.
    const named = COLUMNS.filter((c) => c.key !== "units_per_s" || data.units)
      .filter((c) => c.key !== "confirmed_speedup" || data.trials.some((t) => t.confirmed_speedup || t.same_as_reference))
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
      document.getElementById("rank-legend").textContent = `${data.legend}. Click a column title to sort.`;
    }
    return data.status === "running";
  }

  (async function loop() {
    const again = await refresh();
    if (again) setTimeout(loop, 4000);
  })();
})();
