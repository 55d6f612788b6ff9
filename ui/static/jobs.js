// Jobs page: a launch form generated from the API's JSON schemas, the job list, a live log tail.
"use strict";
(() => {
  const { api, el, bytes, when, duration, pill, empty, banner, poll } = Elastune;
  const HINTS = {
    sweep: "Search a spec's configurations for the highest samples/s inside the memory ceiling. Empty fields keep the spec's own value.",
    train: "Train one configuration: a sweep's best, or the defaults, with any values you change below.",
  };
  let kinds = null, specs = [], sweeps = [], kind = "sweep", selectedJob = null, sweepsByJob = {};
  const ENDED = new Set(["SUCCEEDED", "FAILED", "STOPPED"]), ended = {};  // job id -> how its log said it ended

  // ---- schema helpers -------------------------------------------------------------------------
  const resolve = (schema, node) => (node && node.$ref ? schema.$defs[node.$ref.split("/").pop()] : node);
  function baseType(node) {
    if (node.anyOf) { const t = node.anyOf.find((a) => a.type !== "null"); return t ? baseType(t) : "string"; }
    if (node.enum) return "enum";
    return node.type || "string";
  }
  function enumOf(schema, node) {
    node = resolve(schema, node);
    if (node.enum) return node.enum;
    if (node.anyOf) for (const a of node.anyOf) { const e = a.enum || (a.$ref && resolve(schema, a).enum); if (e) return e; }
    return null;
  }

  function field(name, label, input, desc) {
    return el("div", { class: "field", "data-field": name },
      el("label", { for: `f-${name}` }, label), input,
      desc ? el("div", { class: "desc", text: desc }) : null,
      el("div", { class: "problem", hidden: true }));
  }

  function inputFor(name, node, placeholder, schema) {
    const choices = enumOf(schema, node);
    if (choices) {
      return el("select", { id: `f-${name}`, name }, el("option", { value: "", text: placeholder || "(default)" }),
        choices.map((c) => el("option", { value: String(c), text: String(c) })));
    }
    const type = baseType(node);
    if (type === "boolean") {
      return el("select", { id: `f-${name}`, name }, el("option", { value: "", text: placeholder || "(default)" }),
        el("option", { value: "true", text: "true" }), el("option", { value: "false", text: "false" }));
    }
    const numeric = type === "integer" || type === "number";
    return el("input", { id: `f-${name}`, name, type: "text", inputmode: numeric ? "decimal" : null,
      placeholder: placeholder || "", "data-type": type, autocomplete: "off" });
  }

  // ---- the sweep form: SweepJob's schema, spec chosen by name ----------------------------------
  const SWEEP_UNITS = { memory_ceiling: "(e.g. 512MiB, 2GiB)", cpus_per_trial: "(CPUs)", gpus_per_trial: "(GPUs)" };
  function sweepForm() {
    const schema = kinds.sweep.schema;
    const box = el("div");
    const specSelect = el("select", { id: "f-spec", name: "spec" },
      specs.map((s) => el("option", { value: s.name, text: s.valid ? `${s.name}${s.description ? " — " + s.description : ""}` : `${s.name} (invalid spec)` })));
    const specInfo = el("div", { class: "desc", id: "spec-info" });
    const specField = field("spec", schema.properties.spec.title, specSelect, null);
    specField.insertBefore(specInfo, specField.querySelector(".problem"));
    box.append(specField);
    if (!specs.length) specField.append(el("div", { class: "problem", text: "No specs found in the spec folder (see /api/health for where it looks)." }));
    const rest = el("div", { class: "cols" });
    for (const [name, node] of Object.entries(schema.properties)) {
      if (name === "kind" || name === "spec") continue;
      const label = el("span", {}, node.title || name, SWEEP_UNITS[name] ? el("span", { class: "unit", text: " " + SWEEP_UNITS[name] }) : null);
      rest.append(field(name, label, inputFor(name, node, "", schema), node.description));
    }
    box.append(rest);
    const showSpec = () => {
      const s = specs.find((x) => x.name === specSelect.value);
      if (!s) { specInfo.textContent = ""; return; }
      if (!s.valid) { specInfo.textContent = `This spec does not validate: ${s.error}`; specInfo.className = "problem"; return; }
      specInfo.className = "desc";
      specInfo.textContent = `Searches ${s.parameters.join(", ")}.`;
      const defaults = {
        memory_ceiling: s.memory_ceiling_bytes ? bytes(s.memory_ceiling_bytes) : "no ceiling",
        max_trials: s.max_trials, max_concurrent: s.max_concurrent,
        cpus_per_trial: s.cpus_per_trial, gpus_per_trial: s.gpus_per_trial,
      };
      for (const [k, v] of Object.entries(defaults)) {
        const input = box.querySelector(`[name="${k}"]`);
        if (input) input.placeholder = `spec: ${v}`;
      }
    };
    if (specs.some((s) => s.name === "dlrm_quick")) specSelect.value = "dlrm_quick";  // the README's first sweep
    specSelect.addEventListener("change", showSpec);
    showSpec();
    return box;
  }

  // ---- the training form: from a sweep, plus RunConfig fields as --set overrides -------------
  function trainForm(preselect) {
    const schema = kinds.train.schema, rc = kinds.run_config_schema;
    const box = el("div");
    const trainable = sweeps.filter((s) => s.best_trial_id);
    const from = el("select", { id: "f-from_sweep", name: "from_sweep" }, el("option", { value: "", text: "none: start from the defaults" }),
      trainable.map((s) => el("option", { value: s.sweep_id, text: `${s.name} · ${s.sweep_id} · best ${Elastune.rate(s.best_samples_per_s)} samples/s` })));
    if (preselect) from.value = preselect;
    box.append(field("from_sweep", schema.properties.from_sweep.title, from, schema.properties.from_sweep.description));
    box.append(el("p", { class: "small muted", text: "Overrides: leave a field empty to keep the sweep's (or the default) value." }));
    const walk = (node, prefix, container, depth) => {
      for (const [name, child0] of Object.entries(node.properties || {})) {
        const child = resolve(rc, child0);
        const key = prefix ? `${prefix}.${name}` : name;
        // Only keys the server lets a client set (none names a file); a section shows if any of its keys does.
        if (!kinds.settable_keys.some((k) => k === key || k.startsWith(`${key}.`))) continue;
        if (child.properties) {
          const section = el("details", { class: "section" }, el("summary", { text: child.title || name }));
          const inner = el("div", { class: "cols" });
          section.append(inner);
          walk(child, key, inner, depth + 1);
          container.append(section);
        } else {
          const def = child0.default !== undefined ? child0.default : child.default;
          const shown = def === undefined ? "" : def === null ? "none" : JSON.stringify(def).replace(/"/g, "");
          const input = inputFor(`sets.${key}`, child0, shown ? `default: ${shown}` : "", rc);
          input.dataset.setKey = key;
          container.append(field(`sets.${key}`, key, input, child0.description || child.description));
        }
      }
    };
    const top = el("div", { class: "cols" });
    walk(rc, "", top, 0);
    box.append(top);
    return box;
  }

  function render(preselect) {
    document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.dataset.kind === kind));
    document.getElementById("kind-hint").textContent = HINTS[kind];
    document.getElementById("launch-button").textContent = kind === "sweep" ? "Launch sweep" : "Launch training run";
    const fields = document.getElementById("form-fields");
    fields.replaceChildren(kind === "sweep" ? sweepForm() : trainForm(preselect));
    showProblems([], null);
  }

  function collect() {
    const form = document.getElementById("launch-form");
    const body = { kind };
    const sets = [];
    for (const input of form.querySelectorAll("input[name], select[name]")) {
      const value = input.value.trim();
      if (!value) continue;
      if (input.dataset.setKey) { sets.push(`${input.dataset.setKey}=${value}`); continue; }
      const type = input.dataset.type;
      // Numbers go as JSON numbers; text that is not a number goes as typed so the server says what is wrong.
      if ((type === "integer" || type === "number") && value !== "" && !Number.isNaN(Number(value))) body[input.name] = Number(value);
      else body[input.name] = value;
    }
    if (kind === "train") body.sets = sets;
    return body;
  }

  function showProblems(problems, detail) {
    const form = document.getElementById("launch-form");
    form.querySelectorAll(".field").forEach((f) => { f.classList.remove("invalid"); const p = f.querySelector(".problem"); p.hidden = true; p.textContent = ""; });
    const general = [];
    for (const p of problems) {
      const box = form.querySelector(`.field[data-field="${CSS.escape(p.field)}"]`);
      if (!box) { general.push(`${p.field}: ${p.message}`); continue; }
      box.classList.add("invalid");
      const node = box.querySelector(".problem");
      node.hidden = false;
      node.textContent = node.textContent ? `${node.textContent}; ${p.message}` : p.message;
      const details = box.closest("details"); if (details) details.open = true;
    }
    const err = document.getElementById("form-error");
    const text = general.length ? general.join(" · ") : (detail && !problems.length ? detail : "");
    err.hidden = !text; err.textContent = text;
  }

  async function submit(ev) {
    ev.preventDefault();
    const button = document.getElementById("launch-button");
    button.disabled = true;
    try {
      const job = await api.post("/api/jobs", collect());
      showProblems([], null);
      location.hash = `job=${job.job_id}`;
      select(job.job_id);
      await refreshJobs();
    } catch (e) {
      showProblems(e.problems || [], e.message);
    } finally {
      button.disabled = false;
    }
  }

  // ---- job list ----------------------------------------------------------------------------------
  async function refreshJobs() {
    const [jobs, sweepList] = await Promise.all([api.get("/api/jobs"), api.get("/api/sweeps").catch(() => sweeps)]);
    sweeps = sweepList;
    sweepsByJob = Object.fromEntries(sweeps.filter((s) => s.job_id).map((s) => [s.job_id, s]));
    const box = document.getElementById("job-list");
    document.getElementById("jobs-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (!jobs.length) { box.replaceChildren(empty("No jobs yet", "Launch a sweep or a training run with the form; it will show up here.")); return; }
    const rows = jobs.map((j0) => {
      // A job whose log already said it ended is not shown running again by a list read just before.
      const j = ENDED.has(ended[j0.job_id]) && !ENDED.has(j0.status) ? { ...j0, status: ended[j0.job_id] } : j0;
      const sweep = sweepsByJob[j.job_id];
      const what = j.kind === "sweep" ? (j.spec || "") : j.kind === "train" ? (j.from_sweep ? `best of ${j.from_sweep}` : "defaults") : j.entrypoint.slice(0, 60);
      const kindWord = { sweep: "sweep", train: "training", other: "other" }[j.kind] || j.kind;
      return el("tr", { class: `clickable ${j.job_id === selectedJob ? "selected" : ""}`, "data-job": j.job_id, "data-status": j.status, onclick: () => { location.hash = `job=${j.job_id}`; select(j.job_id); } },
        el("td", {}, el("div", { text: `${kindWord}${what ? " · " + what : ""}`, title: j.entrypoint }), el("div", { class: "small muted mono", text: j.job_id })),
        el("td", {}, pill(j.status)),
        el("td", { text: when(j.start_time) }),
        el("td", { class: "num", text: duration(j.start_time, j.end_time) }),
        el("td", {}, sweep ? el("a", { href: `/sweeps/${encodeURIComponent(sweep.sweep_id)}`, text: "Results", onclick: (e) => e.stopPropagation() }) : null));
    });
    box.replaceChildren(el("div", { class: "table-wrap" }, el("table", { class: "data", id: "jobs-table" },
      el("thead", {}, el("tr", {}, ["Job", "Status", "Started", "Running for", ""].map((h) => el("th", { text: h, class: h === "Running for" ? "num" : "" })))),
      el("tbody", {}, rows))));
  }

  // ---- live log ----------------------------------------------------------------------------------
  // The log's chunk carries the job's status; the job list is polled less often. When they differ
  // (the job has just ended, or started), the job's row takes the log's status at once and the list
  // is read again for the rest (its end time): the row never says "running" under a finished log.
  let relisting = false;
  function catchUp(jobId, status) {
    if (ENDED.has(status)) ended[jobId] = status;
    const row = document.querySelector(`#jobs-table tr[data-job="${CSS.escape(jobId)}"]`);
    if (!row || row.dataset.status === status) return;
    row.dataset.status = status;
    const shown = row.querySelector(".pill");
    if (shown) shown.replaceWith(pill(status));
    if (relisting) return;
    relisting = true;
    refreshJobs().catch((e) => banner(e.message)).finally(() => { relisting = false; });
  }

  let stopLog = null;
  function select(jobId) {
    if (stopLog) stopLog();
    selectedJob = jobId;
    document.querySelectorAll("#jobs-table tr[data-job]").forEach((r) => r.classList.toggle("selected", r.dataset.job === jobId));
    const card = document.getElementById("log-card"), text = document.getElementById("log-text");
    card.hidden = false;
    document.getElementById("log-job").textContent = jobId;
    document.getElementById("log-links").replaceChildren();
    text.textContent = "";
    let offset = 0, done = false, cancelled = false;
    const tick = async () => {
      if (cancelled) return;
      try {
        const chunk = await api.get(`/api/jobs/${encodeURIComponent(jobId)}/logs?offset=${offset}`);
        if (chunk.skipped_chars) text.append(`… ${chunk.skipped_chars.toLocaleString()} earlier characters left out …\n`);
        if (chunk.text) text.append(chunk.text);
        offset = chunk.offset;
        const status = document.getElementById("log-status");
        status.className = `pill ${chunk.status}`; status.textContent = Elastune.STATUS_WORDS[chunk.status] || chunk.status;
        catchUp(jobId, chunk.status);
        document.getElementById("log-stop").hidden = chunk.done;
        if (!text.textContent) text.textContent = chunk.done ? "(this job wrote no log)" : "(waiting for the first log lines…)\n";
        else if (text.textContent.startsWith("(waiting")) text.textContent = chunk.text;
        if (document.getElementById("log-follow").checked) text.scrollTop = text.scrollHeight;
        const sweep = sweepsByJob[jobId];
        if (sweep) document.getElementById("log-links").replaceChildren("Results: ", el("a", { href: `/sweeps/${encodeURIComponent(sweep.sweep_id)}`, text: sweep.name }));
        done = chunk.done;
        banner(null);
      } catch (e) {
        banner(e.message);
      }
      if (!done && !cancelled) timer = setTimeout(tick, 1500);
    };
    let timer = null;
    tick();
    stopLog = () => { cancelled = true; clearTimeout(timer); };
  }

  async function stopSelected() {
    if (!selectedJob || !confirm(`Stop job ${selectedJob}? Its running trials are ended.`)) return;
    try { const r = await api.post(`/api/jobs/${encodeURIComponent(selectedJob)}/stop`); banner(r.stopped ? `Stop requested for ${r.job_id}.` : `${r.job_id}: ${r.message || "not stopped"}`, "info"); }
    catch (e) { banner(e.message); }
    refreshJobs().catch(() => {});
  }

  // ---- start -------------------------------------------------------------------------------------
  async function start() {
    try {
      const [published, specList] = await Promise.all([api.get("/api/job-kinds"), api.get("/api/specs")]);
      kinds = { ...published.kinds, run_config_schema: published.run_config_schema, settable_keys: published.settable_keys };
      specs = specList;
      sweeps = await api.get("/api/sweeps").catch(() => []);
    } catch (e) {
      document.getElementById("form-fields").replaceChildren(el("p", { class: "error", text: e.message }));
      return;
    }
    const params = new URLSearchParams(location.search);
    if (params.get("train")) kind = "train";
    render(params.get("train"));
    document.querySelectorAll(".tab").forEach((t) => t.addEventListener("click", () => { kind = t.dataset.kind; render(); }));
    document.getElementById("launch-form").addEventListener("submit", submit);
    document.getElementById("log-stop").addEventListener("click", stopSelected);
    const m = location.hash.match(/job=([^&]+)/);
    if (m) select(decodeURIComponent(m[1]));
  }
  start();
  poll(refreshJobs, 3000);
})();
