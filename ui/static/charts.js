// Small hand-written SVG charts (no library to vendor): scatter with a front and a ceiling,
// parallel coordinates, a stacked bar, a timeline. Each draws into a container and keeps a tooltip.
"use strict";
const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
    for (const c of children.flat()) if (c) node.append(typeof c === "string" ? document.createTextNode(c) : c);
    return node;
  }
  function ticks(lo, hi, count = 5) {
    if (!(hi > lo)) hi = lo + 1;
    const step0 = (hi - lo) / count, mag = 10 ** Math.floor(Math.log10(step0));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((x) => x >= step0) || step0;
    const out = [];
    // The last tick is at or above `hi`, so nothing drawn (a ceiling, a capacity) falls off the top.
    const top = Math.ceil(hi / step - 1e-9) * step;
    for (let v = Math.ceil(lo / step) * step; v <= top + step * 1e-9; v += step) out.push(+v.toFixed(10));
    return out;
  }
  // The range an axis spans for `values`: their lowest and highest. Where they are all equal the
  // range is widened around the value by half its size (by 1 around 0), so the value sits in the
  // middle, and never below `floor` (0 for what cannot be negative: memory, samples/s).
  function span(values, floor = -Infinity) {
    let lo = Math.min(...values), hi = Math.max(...values);
    if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [Math.max(floor, 0), Math.max(floor, 0) + 1];
    if (!(hi > lo)) { const pad = Math.abs(lo) / 2 || 1; lo = Math.max(floor, lo - pad); hi += pad; }
    return [lo, hi];
  }
  // Draw at the container's own width: the SVG is then not scaled and its text keeps its size.
  // A container not yet in the page has no width: fall back to the main column's.
  const width = (container) => {
    const main = document.querySelector("main");
    return Math.max(360, Math.round(container.clientWidth || (main ? main.clientWidth - 72 : 640)));
  };
  const fmt = (v) => (Math.abs(v) >= 1000 ? Math.round(v).toLocaleString("en-US") : +v.toPrecision(3) + "");
  function tooltip(container) {
    let tip = container.querySelector(".tooltip");
    if (!tip) { tip = document.createElement("div"); tip.className = "tooltip"; tip.hidden = true; container.append(tip); }
    return {
      show(ev, lines) {
        tip.replaceChildren(...lines.flatMap((l, i) => (i ? [document.createElement("br"), l] : [l])));
        tip.hidden = false;
        const box = container.getBoundingClientRect();
        let x = ev.clientX - box.left + 12, y = ev.clientY - box.top + 12;
        if (x + tip.offsetWidth > box.width) x -= tip.offsetWidth + 24;
        tip.style.left = `${x}px`; tip.style.top = `${y}px`;
      },
      hide() { tip.hidden = true; },
    };
  }
  function legend(items) {
    const box = document.createElement("div"); box.className = "legend";
    for (const { label, color, shape } of items) {
      const sw = document.createElement("span"); sw.className = "sw"; sw.style.background = color;
      if (shape === "line") { sw.style.height = "3px"; sw.style.verticalAlign = "3px"; }
      if (shape === "hollow") { sw.style.background = "#fff"; sw.style.border = `2px solid ${color}`; sw.style.borderRadius = "50%"; }
      if (shape === "dash") { sw.style.background = `repeating-linear-gradient(90deg, ${color} 0 4px, transparent 4px 7px)`; sw.style.height = "3px"; sw.style.verticalAlign = "3px"; }
      if (shape === "cross") { sw.style.background = "none"; sw.textContent = "×"; sw.style.color = color; sw.style.fontWeight = "700"; sw.style.width = "auto"; sw.style.height = "auto"; }
      const item = document.createElement("span"); item.append(sw, label); box.append(item);
    }
    return box;
  }
  function axes(svg, o) {
    const { x, y, xTicks, yTicks, L, R, T, B, W, H, xFmt, yFmt } = o;
    const grid = s("g", { class: "grid" });
    for (const v of yTicks) grid.append(s("line", { x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    for (const v of xTicks) grid.append(s("line", { x1: x(v), x2: x(v), y1: T, y2: H - B }));
    svg.append(grid);
    svg.append(s("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#9aa3b2" }));
    svg.append(s("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#9aa3b2" }));
    for (const v of xTicks) svg.append(s("text", { x: x(v), y: H - B + 14, "text-anchor": "middle" }, (xFmt || fmt)(v)));
    for (const v of yTicks) svg.append(s("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, (yFmt || fmt)(v)));
  }

  // points: [{x, y, color, r, ring, hollow, id, tip:[..]}] (hollow: x is a predicted figure, not a measured one); strip: [{x, color, id, tip}]; front: [{x,y}]; ceiling: x or null
  function scatter(container, o) {
    container.replaceChildren();
    const W = width(container), H = 380, L = 70, R = 18, T = 16, B = o.strip && o.strip.length ? 92 : 56;
    const xs = [...o.points.map((p) => p.x), ...(o.strip || []).map((p) => p.x), o.ceiling || 0];
    const ys = o.points.map((p) => p.y);
    const xTicks = ticks(0, Math.max(...xs, 1e-9) * 1.08), yTicks = ticks(0, Math.max(...ys, 1e-9) * 1.1);
    const xMax = xTicks[xTicks.length - 1], yMax = yTicks[yTicks.length - 1];
    const x = (v) => L + (v / xMax) * (W - L - R), y = (v) => H - B - (v / yMax) * (H - B - T);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": o.label || "scatter plot" });
    axes(svg, { x, y, xTicks, yTicks, L, R, T, B, W, H, xFmt: o.xFmt });
    svg.append(s("text", { class: "axis-title", x: (L + W - R) / 2, y: H - B + 32, "text-anchor": "middle" }, o.xTitle));
    svg.append(s("text", { class: "axis-title", transform: `translate(16 ${(T + H - B) / 2}) rotate(-90)`, "text-anchor": "middle" }, o.yTitle));
    const tip = tooltip(container);
    if (o.ceiling) {
      svg.append(s("line", { x1: x(o.ceiling), x2: x(o.ceiling), y1: T, y2: H - B + (B > 60 ? 44 : 0), stroke: "#b3261e", "stroke-width": 1.5, "stroke-dasharray": "6 4" }));
      svg.append(s("text", { x: x(o.ceiling) - 4, y: T + 10, "text-anchor": "end", style: "fill:#b3261e" }, o.ceilingLabel || "ceiling"));
    }
    if (o.front && o.front.length) {
      const f = [...o.front].sort((a, b) => a.x - b.x);
      let d = `M${x(f[0].x)},${y(f[0].y)}`;
      for (let i = 1; i < f.length; i++) d += ` H${x(f[i].x)} V${y(f[i].y)}`;
      svg.append(s("path", { d, fill: "none", stroke: "#2457a6", "stroke-width": 1.5, "stroke-opacity": 0.6, "data-role": "pareto-front" }));
    }
    const hook = (node, p) => {
      node.addEventListener("mousemove", (ev) => tip.show(ev, p.tip));
      node.addEventListener("mouseleave", () => tip.hide());
      if (o.onClick) node.addEventListener("click", () => o.onClick(p.id));
      node.style.cursor = o.onClick ? "pointer" : "default";
    };
    for (const p of o.points) {
      const c = p.hollow
        ? s("circle", { cx: x(p.x), cy: y(p.y), r: p.r || 5, fill: "#fff", stroke: p.color, "stroke-width": 2, "data-trial": p.id, "data-role": "point" })
        : s("circle", { cx: x(p.x), cy: y(p.y), r: p.r || 5, fill: p.color, "fill-opacity": 0.85, stroke: p.ring ? "#17243a" : "#fff", "stroke-width": p.ring ? 2 : 1, "data-trial": p.id, "data-role": p.ring ? "pareto-point" : "point" });
      hook(c, p); svg.append(c);
    }
    if (o.strip && o.strip.length) {
      const sy = H - B + 56;
      svg.append(s("text", { x: L - 6, y: sy + 4, "text-anchor": "end" }, "not run"));
      svg.append(s("line", { x1: L, x2: W - R, y1: sy, y2: sy, stroke: "#e3e6ec" }));
      for (const p of o.strip) {
        const g = s("text", { x: x(p.x), y: sy + 5, "text-anchor": "middle", style: `fill:${p.color};font-size:15px;font-weight:700`, "data-trial": p.id, "data-role": "strip-point" }, "×");
        hook(g, p); svg.append(g);
      }
    }
    container.append(svg);
    if (o.legend) container.append(legend(o.legend));
    return svg;
  }

  // dims: [{key, label, numeric, fmt, floor}], rows: [{id, values:{key:v}, color, dashed, tip}]
  // A numeric axis spans its values (`span`, never below the dim's floor) and is labelled at both
  // ends; one whose values are all equal has its one value in the middle, labelled once.
  function parcoords(container, o) {
    container.replaceChildren();
    const W = Math.max(width(container), o.dims.length * 120), H = 320, L = 60, R = 60, T = 34, B = 24;
    const step = o.dims.length > 1 ? (W - L - R) / (o.dims.length - 1) : 0;
    const scales = o.dims.map((d) => {
      const vals = o.rows.map((r) => r.values[d.key]).filter((v) => v !== null && v !== undefined);
      if (d.numeric) {
        const nums = vals.filter((v) => typeof v === "number" && Number.isFinite(v));
        const [lo, hi] = span(nums, d.floor);
        const pos = (v) => (typeof v === "number" && Number.isFinite(v) ? H - B - ((v - lo) / (hi - lo)) * (H - B - T) : null);
        const one = nums.length && Math.min(...nums) === Math.max(...nums);
        return { pos, labels: one ? [[nums[0], pos(nums[0])]] : nums.length ? [[lo, H - B], [hi, T]] : [], fmt: d.fmt || fmt };
      }
      const cats = [...new Set(vals.map(String))].sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
      const at = (i) => (cats.length === 1 ? (T + H - B) / 2 : H - B - (i / (cats.length - 1)) * (H - B - T));
      return { pos: (v) => at(cats.indexOf(String(v))), labels: cats.map((c, i) => [c, at(i)]), fmt: (v) => v };
    });
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": o.label || "parallel coordinates" });
    const tip = tooltip(container);
    const lines = s("g");
    for (const r of o.rows) {
      const pts = o.dims.map((d, i) => { const v = r.values[d.key], py = v === null || v === undefined ? null : scales[i].pos(v); return py === null ? null : `${L + i * step},${py}`; });
      if (pts.some((p) => p === null)) continue;
      const line = s("polyline", { points: pts.join(" "), fill: "none", stroke: r.color, "stroke-width": 1.6, "stroke-opacity": 0.55, "stroke-dasharray": r.dashed ? "6 4" : null, "data-trial": r.id });
      line.addEventListener("mousemove", (ev) => { line.setAttribute("stroke-width", 3.5); line.setAttribute("stroke-opacity", 1); tip.show(ev, r.tip); });
      line.addEventListener("mouseleave", () => { line.setAttribute("stroke-width", 1.6); line.setAttribute("stroke-opacity", 0.55); tip.hide(); });
      lines.append(line);
    }
    svg.append(lines);
    o.dims.forEach((d, i) => {
      const ax = L + i * step, g = s("g", { "data-axis": d.key });
      g.append(s("line", { x1: ax, x2: ax, y1: T, y2: H - B, stroke: "#9aa3b2" }));
      g.append(s("text", { class: "axis-title", x: ax, y: T - 14, "text-anchor": "middle" }, d.label));
      for (const [v, py] of scales[i].labels) g.append(s("text", { class: "tick", x: ax + 5, y: py + 4, style: "paint-order:stroke;stroke:#fff;stroke-width:3px" }, String(scales[i].fmt(v))));
      svg.append(g);
    });
    container.append(svg);
    if (o.legend) container.append(legend(o.legend));
  }

  // A horizontal bar of `total` bytes split into segments [{label, value, color, inner, tip}]
  function stackedBar(container, o) {
    container.replaceChildren();
    const W = width(container), H = 46, L = 0, R = 0;
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": o.label || "stacked bar" });
    const tip = tooltip(container);
    let at = 0;
    const scale = (v) => (v / Math.max(o.total, 1)) * (W - L - R);
    for (const seg of o.segments) {
      const w = scale(seg.value);
      if (w <= 0) continue;
      const g = s("g", { "data-segment": seg.label });
      g.append(s("rect", { x: L + at, y: 4, width: w, height: H - 8, fill: seg.color, stroke: "#fff", "stroke-width": 1 }));
      if (seg.inner) g.append(s("rect", { x: L + at, y: H / 2 - 1, width: Math.min(w, scale(seg.inner)), height: H / 2 - 3, fill: "#000", "fill-opacity": 0.28 }));
      const ink = seg.label === "free" ? "#5b6576" : "#fff";  // the free part is pale: dark text on it
      if (w > 70) g.append(s("text", { x: L + at + 6, y: 20, style: `fill:${ink};font-size:11px;font-weight:600` }, seg.short || seg.label));
      g.addEventListener("mousemove", (ev) => tip.show(ev, seg.tip));
      g.addEventListener("mouseleave", () => tip.hide());
      svg.append(g);
      at += w;
    }
    container.append(svg);
  }

  // series: [{label, color, dashed, points:[{t, v}]}] with t in seconds; yMax; yFmt
  function timeline(container, o) {
    container.replaceChildren();
    const W = width(container), H = 220, L = 64, R = 14, T = 12, B = 34;
    const all = o.series.flatMap((se) => se.points);
    const tMax = Math.max(...all.map((p) => p.t), Date.now() / 1000), tMin = tMax - o.window;
    const yTicks = ticks(0, Math.max(o.yMax || 0, ...all.map((p) => p.v), 1e-9));
    const yTop = yTicks[yTicks.length - 1];
    const x = (t) => L + ((t - tMin) / (tMax - tMin)) * (W - L - R), y = (v) => H - B - (v / yTop) * (H - B - T);
    const xTicks = ticks(-o.window / 60, 0, 5).map((m) => m * 60);  // whole minutes
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": o.label || "timeline" });
    axes(svg, { x: (v) => x(tMax + v), y, xTicks, yTicks, L, R, T, B, W, H, xFmt: (v) => (v === 0 ? "now" : `${Math.round(v / 60)} min`), yFmt: o.yFmt });
    if (o.yMax) svg.append(s("line", { x1: L, x2: W - R, y1: y(o.yMax), y2: y(o.yMax), stroke: "#b3261e", "stroke-dasharray": "5 4" }));
    for (const se of o.series) {
      const pts = se.points.filter((p) => p.t >= tMin).sort((a, b) => a.t - b.t);
      if (!pts.length) continue;
      let d = `M${x(pts[0].t)},${y(pts[0].v)}`;
      for (let i = 1; i < pts.length; i++) d += ` H${x(pts[i].t)} V${y(pts[i].v)}`;
      svg.append(s("path", { d, fill: "none", stroke: se.color, "stroke-width": 1.8, "stroke-dasharray": se.dashed ? "4 3" : null }));
    }
    container.append(svg);
    if (o.legend) container.append(legend(o.legend));
  }

  const PALETTE = ["#2457a6", "#d1731f", "#2f8f5b", "#8a3fa0", "#c0392b", "#1b8a9a", "#7d6b12", "#5d6d7e"];
  return { scatter, parcoords, stackedBar, timeline, legend, span, PALETTE };
})();
