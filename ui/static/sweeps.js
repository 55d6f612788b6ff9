// Sweep list: one row per sweep in the MLflow store.
"use strict";
(() => {
  const { api, el, bytes, rate, when, duration, pill, empty, poll } = Elastune;
  // The best's ranking figure, named: the confirmed ratio where the confirmation ran, else measured samples/s.
  const bestText = (sw) => (sw.ranked_by === "confirmed" && sw.best_confirmed_speedup
    ? `${sw.best_confirmed_speedup[1].toFixed(2)}× ref, confirmed` : sw.best_samples_per_s ? `${rate(sw.best_samples_per_s)} samples/s, measured` : "–");
  async function refresh() {
    const box = document.getElementById("sweep-list");
    const sweeps = await api.get("/api/sweeps");
    if (!sweeps.length) {
      const health = await api.get("/api/health");
      box.replaceChildren(empty("No sweeps recorded yet", `Nothing in the MLflow store (${health.tracking_uri}). Launch one from the Jobs page; it appears here as soon as it starts.`));
      return;
    }
    const rows = sweeps.map((sw) => {
      const c = sw.counts;
      const open = () => { location.href = `/sweeps/${encodeURIComponent(sw.sweep_id)}`; };
      return el("tr", { class: "clickable", onclick: open },
        el("td", {}, el("a", { href: `/sweeps/${encodeURIComponent(sw.sweep_id)}`, text: sw.name }), el("div", { class: "small muted mono", text: sw.sweep_id })),
        el("td", {}, pill(sw.status)),
        el("td", { class: "num", text: sw.trial_count === null ? "–" : String(sw.trial_count) }),
        el("td", { text: c ? `${c.ok} ok · ${c.infeasible} ruled out · ${c.oom} OOM · ${c.pruned} stopped early · ${c.failed} failed${c.running ? ` · ${c.running} running` : ""}` : "open to see" }),
        el("td", { class: "num", text: bestText(sw) }),
        el("td", { class: "num", text: sw.memory_ceiling_bytes ? bytes(sw.memory_ceiling_bytes) : "none" }),
        el("td", { text: when(sw.started_at) }),
        el("td", { class: "num", text: duration(sw.started_at, sw.ended_at) }));
    });
    const heads = [["Sweep", ""], ["Status", ""], ["Trials", "num"], ["Outcomes", ""], ["Best (the figure that ranks)", "num"], ["Memory ceiling", "num"], ["Started", ""], ["Took", "num"]];
    box.replaceChildren(el("div", { class: "table-wrap" }, el("table", { class: "data", id: "sweeps-table" },
      el("thead", {}, el("tr", {}, heads.map(([h, c]) => el("th", { class: c, text: h })))), el("tbody", {}, rows))));
  }
  poll(refresh, 5000);
})();
