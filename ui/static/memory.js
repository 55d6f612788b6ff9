// EDO memory: per device a stacked bar (each trial's grant with its measured use inside, the
// reserve, the free part) and a timeline of grants and use over the last minutes.
"use strict";
(() => {
  const { api, el, bytes, empty, poll } = Elastune;
  const WINDOW_S = 600;
  const color = (() => { const seen = {}; return (id) => (seen[id] ??= Charts.PALETTE[Object.keys(seen).length % Charts.PALETTE.length]); })();

  function device(d, timeline) {
    const card = el("section", { class: "card device", "data-device": d.device });
    const pct = (v) => `${((100 * v) / Math.max(d.capacity_bytes, 1)).toFixed(0)}%`;
    card.append(el("h2", {}, d.device, el("span", { class: "muted", text: ` · capacity ${bytes(d.capacity_bytes)} · granted ${bytes(d.granted_bytes)} (${pct(d.granted_bytes)}) · used ${bytes(d.used_bytes)} · free ${bytes(d.free_bytes)}` })));
    const segments = d.trials.map((t) => ({
      label: t.trial_id, short: `${t.trial_id}`, value: t.grant_bytes, inner: t.used_bytes, color: color(t.trial_id),
      tip: [`trial ${t.trial_id} (${t.state})`, `granted ${bytes(t.grant_bytes)}, measured use ${bytes(t.used_bytes)}`, `needs at least ${bytes(t.min_bytes)}, wants ${bytes(t.want_bytes)}`],
    }));
    segments.push({ label: "reserve", short: "reserve", value: d.reserve_bytes, color: "#9aa3b2", tip: [`reserve ${bytes(d.reserve_bytes)}`, "kept back for the CUDA context and spikes"] });
    segments.push({ label: "free", short: "free", value: d.free_bytes, color: "#dfe5ee", tip: [`free ${bytes(d.free_bytes)}`] });
    const bar = el("div", { class: "chart bar" });
    Charts.stackedBar(bar, { total: d.capacity_bytes, segments, label: `memory of ${d.device}` });
    card.append(bar);
    card.append(Charts.legend([...d.trials.map((t) => ({ label: `${t.trial_id}: ${bytes(t.grant_bytes)} granted, ${bytes(t.used_bytes)} used`, color: color(t.trial_id) })),
      { label: `reserve ${bytes(d.reserve_bytes)}`, color: "#9aa3b2" }, { label: `free ${bytes(d.free_bytes)}`, color: "#dfe5ee" }]));
    card.append(el("p", { class: "small muted", text: "The darker band inside each grant is the memory the trial measured using." }));
    if (!d.trials.length) card.append(el("p", { class: "muted", text: "No trial holds a grant on this device right now." }));
    const points = timeline.filter((p) => p.device === d.device);
    card.append(el("h2", { text: `Last ${WINDOW_S / 60} minutes`, style: "margin-top:14px" }));
    const tl = el("div", { class: "chart" });
    if (!points.length) tl.append(el("p", { class: "muted", text: "No history yet." }));
    else {
      const ids = [...new Set(points.map((p) => p.trial_id))];
      const series = ids.flatMap((id) => [
        { label: `${id} granted`, color: color(id), points: points.filter((p) => p.trial_id === id).map((p) => ({ t: p.t, v: p.grant_bytes / 2 ** 30 })) },
        { label: `${id} used`, color: color(id), dashed: true, points: points.filter((p) => p.trial_id === id).map((p) => ({ t: p.t, v: (p.used_bytes || 0) / 2 ** 30 })) },
      ]);
      Charts.timeline(tl, { series, window: WINDOW_S, yMax: d.capacity_bytes / 2 ** 30, yFmt: (v) => `${+v.toFixed(2)} GiB`, label: `grants over time on ${d.device}`,
        legend: [{ label: "granted (solid)", color: "#5b6576", shape: "line" }, { label: "measured use (dashed)", color: "#5b6576", shape: "dash" }, { label: "capacity", color: "#b3261e", shape: "dash" }] });
    }
    card.append(tl);
    return card;
  }

  async function refresh() {
    const status = await api.get(`/api/memory?timeline_s=${WINDOW_S}`);
    document.getElementById("mem-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    const box = document.getElementById("memory");
    if (!status.available) { box.replaceChildren(el("section", { class: "card" }, empty("No shared devices to show", status.reason))); return; }
    if (!status.devices.length) { box.replaceChildren(el("section", { class: "card" }, empty("The broker knows no devices yet", "Devices appear when the first trial asks for a grant."))); return; }
    box.replaceChildren(...status.devices.map((d) => device(d, status.timeline)));
  }
  poll(refresh, 2000);
})();
