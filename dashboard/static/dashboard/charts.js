// Line charts drawn as SVG for the dashboard's last hour: no library, no build step.
// Charts.draw(figure, spec, at, series) redraws one <figure>: `at` the samples' times (Unix
// seconds), `series` a label's values at those times (null: no value then).
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const H = 150, MIN_W = 240;
  const PAD = { left: 62, right: 8, top: 8, bottom: 20 };
  const MIN_SPAN = 600; // seconds: the first minutes' points sit at the right, not spread out
  const COLORS = ["#3060c0", "#1f8a4c", "#c0392b", "#8e44ad", "#d68910", "#138d90", "#c2185b", "#5d6d7e"];

  function el(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text != null) node.textContent = text;
    return node;
  }

  // One color per model in every chart: the label's model part ("tiny p95" -> "tiny") hashed.
  function color(label) {
    const base = label.replace(/ p(50|95)$/, "");
    let hash = 0;
    for (const ch of base) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
    return COLORS[hash % COLORS.length];
  }

  // The axis top: 1, 2 or 5 times a power of ten, at or above the largest value.
  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 5, 10].find((m) => m * power >= value * (1 - 1e-9)) * power;
  }

  function clock(seconds, withSeconds) {
    const options = { hour: "2-digit", minute: "2-digit", hour12: false, ...(withSeconds && { second: "2-digit" }) };
    return new Date(seconds * 1000).toLocaleTimeString([], options);
  }

  // A series' runs of consecutive values: a missing value breaks the line.
  function runs(at, values) {
    const out = [];
    let run = [];
    values.forEach((v, i) => {
      if (v == null) { if (run.length) out.push(run); run = []; } else run.push([at[i], v]);
    });
    if (run.length) out.push(run);
    return out;
  }

  function axes(svg, spec, W, [x0, x1], top) {
    const plotW = W - PAD.left - PAD.right, plotH = H - PAD.top - PAD.bottom;
    for (const share of [0, 0.5, 1]) {
      const y = PAD.top + plotH * (1 - share);
      svg.append(el("line", { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: "grid" }));
      svg.append(el("text", { x: PAD.left - 4, y: y + 3, "text-anchor": "end", class: "tick" },
        spec.format(top * share)));
    }
    const withSeconds = x1 - x0 < MIN_SPAN;
    for (const share of [0, 1 / 3, 2 / 3, 1]) {
      const anchor = share === 0 ? "start" : share === 1 ? "end" : "middle";
      svg.append(el("text", { x: PAD.left + plotW * share, y: H - 6, "text-anchor": anchor, class: "tick time" },
        clock(x0 + (x1 - x0) * share, withSeconds)));
    }
  }

  function line(run, place, label) {
    if (run.length === 1) {
      const [x, y] = place(run[0]);
      return el("circle", { cx: x, cy: y, r: 2.5, fill: color(label), "data-label": label, "data-points": 1 });
    }
    const d = run.map((p, i) => `${i ? "L" : "M"}${place(p).map((n) => n.toFixed(1)).join(",")}`).join("");
    return el("path", {
      d, fill: "none", stroke: color(label), "stroke-width": 1.6, "data-label": label, "data-points": run.length,
      ...(label.endsWith(" p95") && { "stroke-dasharray": "4 3" }),
    });
  }

  function legend(series, spec) {
    const list = document.createElement("ul");
    list.className = "legend";
    for (const [label, values] of Object.entries(series)) {
      const last = values.filter((v) => v != null).pop();
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = color(label);
      item.append(swatch, `${label}: ${last == null ? "–" : spec.format(last)}`);
      list.append(item);
    }
    return list;
  }

  function draw(figure, spec, at, series) {
    const values = Object.values(series).flat().filter((v) => v != null);
    figure.querySelectorAll(":scope > :not(figcaption)").forEach((node) => node.remove());
    figure.dataset.points = values.length;
    if (!values.some((v) => v !== 0)) {
      const empty = document.createElement("p");
      empty.className = "chart-empty";
      empty.textContent = spec.empty;
      figure.append(empty);
      return;
    }
    // Drawn at the figure's own width, so the labels keep their size (redrawn with each sample).
    const W = Math.max(MIN_W, figure.clientWidth - 24);
    const x1 = at[at.length - 1], x0 = Math.min(at[0], x1 - MIN_SPAN);
    const scale = spec.scale || 1; // bytes: a round number of MiB
    const top = spec.top || niceMax(Math.max(...values) / scale) * scale;
    const plotW = W - PAD.left - PAD.right, plotH = H - PAD.top - PAD.bottom;
    const place = ([t, v]) => [PAD.left + (plotW * (t - x0)) / (x1 - x0), PAD.top + plotH * (1 - v / top)];
    const svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": spec.title });
    axes(svg, spec, W, [x0, x1], top);
    for (const [label, column] of Object.entries(series)) {
      for (const run of runs(at, column)) svg.append(line(run, place, label));
    }
    figure.append(svg, legend(series, spec));
  }

  return { draw };
})();
