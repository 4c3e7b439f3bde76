// Charts drawn as inline SVG by the console itself (no library, no request anywhere): lines over
// time and horizontal bars. Each series differs by colour, by dash or fill pattern and by marker
// shape, and is named in a legend, so no chart needs colour to be read; every chart's numbers
// are also a table below it. A chart takes the keyboard focus: the arrow keys walk its points
// (or bars), Home and End jump to either end, and each step is read out in words.
// Every text (tool names come from tenants) is set as text: nothing here parses markup.
import { append, h, table } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 760;
const PLOT = { left: 56, right: 36, top: 12, bottom: 36 };
// Okabe and Ito's palette (told apart with the common colour-vision deficiencies), then black.
const COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00", "#000000"];
const DASHES = ["", "7 4", "2 3", "10 3 2 3", "4 2", "1 5", "12 6"];
const MARKERS = ["circle", "square", "triangle", "diamond", "cross", "bar", "star"];
const FILLS = ["solid", "hatch", "dots", "cross-hatch", "vertical", "horizontal", "solid"];

let charts = 0;

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** How series `i` looks: colour, dash, marker shape and fill pattern (all three but colour
 * repeat only after seven series, and never all at once). */
export function styleOf(i) {
  return {
    colour: COLOURS[i % COLOURS.length],
    dash: DASHES[i % DASHES.length],
    marker: MARKERS[i % MARKERS.length],
    fill: FILLS[(i + Math.floor(i / FILLS.length)) % FILLS.length],
  };
}

function marker(shape, x, y, colour, attrs) {
  const r = 4;
  const common = { fill: colour, stroke: colour, ...attrs };
  switch (shape) {
    case "square": return svg("rect", { x: x - r, y: y - r, width: 2 * r, height: 2 * r, ...common });
    case "triangle": return svg("path", { d: `M${x} ${y - r - 1}L${x + r + 1} ${y + r}L${x - r - 1} ${y + r}Z`, ...common });
    case "diamond": return svg("path", { d: `M${x} ${y - r - 1}L${x + r + 1} ${y}L${x} ${y + r + 1}L${x - r - 1} ${y}Z`, ...common });
    case "cross": return svg("path", { d: `M${x - r} ${y - r}L${x + r} ${y + r}M${x - r} ${y + r}L${x + r} ${y - r}`, "stroke-width": 2.5, ...common, fill: "none" });
    case "bar": return svg("rect", { x: x - r - 1, y: y - 1.5, width: 2 * r + 2, height: 3, ...common });
    case "star": return svg("path", { d: `M${x} ${y - r - 1}L${x + 1.5} ${y - 1.5}L${x + r + 1} ${y}L${x + 1.5} ${y + 1.5}L${x} ${y + r + 1}L${x - 1.5} ${y + 1.5}L${x - r - 1} ${y}L${x - 1.5} ${y - 1.5}Z`, ...common });
    default: return svg("circle", { cx: x, cy: y, r, ...common });
  }
}

/** The fill patterns of one chart (ids unique in the page). */
function patterns(prefix, count) {
  const defs = svg("defs");
  const ids = [];
  for (let i = 0; i < count; i += 1) {
    const { colour, fill } = styleOf(i);
    const id = `${prefix}-fill-${i}`;
    ids.push(fill === "solid" ? colour : `url(#${id})`);
    if (fill === "solid") continue;
    const lines = {
      hatch: [["M0 8L8 0", "M-2 2L2 -2", "M6 10L10 6"]],
      "cross-hatch": [["M0 8L8 0", "M0 0L8 8"]],
      vertical: [["M4 0L4 8"]],
      horizontal: [["M0 4L8 4"]],
    }[fill];
    append(defs, svg("pattern", { id, width: 8, height: 8, patternUnits: "userSpaceOnUse" },
      svg("rect", { width: 8, height: 8, fill: "#ffffff" }),
      fill === "dots"
        ? svg("circle", { cx: 4, cy: 4, r: 1.8, fill: colour })
        : lines[0].map((d) => svg("path", { d, stroke: colour, "stroke-width": 2 }))));
  }
  return { defs, fills: ids };
}

/** A round upper bound for an axis and its steps: 0, 1/4, ... of it. */
function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  const step = [1, 2, 2.5, 5, 10].find((m) => m * power >= value / 4 * 0.999) * power;
  return step * 4;
}

export function formatNumber(value, unit = "") {
  if (value === null || value === undefined) return "-";
  const rounded = Math.abs(value) >= 100 ? Math.round(value) : Math.round(value * 100) / 100;
  return `${rounded.toLocaleString("en-US")}${unit ? ` ${unit}` : ""}`;
}

function legend(series, swatch) {
  return h("ul", { class: "legend", "aria-label": "Legend" },
    series.map((s, i) => h("li", {}, swatch(i), " ", s.name)));
}

function lineSwatch(i) {
  const { colour, dash, marker: shape } = styleOf(i);
  return svg("svg", { width: 36, height: 12, viewBox: "0 0 36 12", "aria-hidden": "true" },
    svg("line", { x1: 2, y1: 6, x2: 34, y2: 6, stroke: colour, "stroke-width": 2, "stroke-dasharray": dash || null }),
    marker(shape, 18, 6, colour));
}

function barSwatch(fills) {
  return (i) => svg("svg", { width: 24, height: 12, viewBox: "0 0 24 12", "aria-hidden": "true" },
    svg("rect", { x: 1, y: 1, width: 22, height: 10, fill: fills[i], stroke: styleOf(i).colour }));
}

/** Arrow keys, Home and End walk `count` places of the chart; `say(i)` draws the cursor at
 * place `i` and gives the words the readout shows. */
function walkable(node, count, say, readout) {
  let at = -1;
  const go = (i) => {
    at = Math.max(0, Math.min(count - 1, i));
    readout.textContent = say(at);
  };
  node.addEventListener("keydown", (event) => {
    const moves = { ArrowRight: at + 1, ArrowDown: at + 1, ArrowLeft: at - 1, ArrowUp: at - 1, Home: 0, End: count - 1 };
    if (!(event.key in moves) || !count) return;
    event.preventDefault();
    go(at < 0 && event.key !== "End" ? 0 : moves[event.key]);
  });
  node.addEventListener("focus", () => { if (at < 0 && count) go(0); });
}

function frame(title, hint, svgNode, readout, legendNode, numbers) {
  return h("figure", { class: "chart", "aria-label": title },
    h("figcaption", {}, title),
    legendNode,
    svgNode,
    h("p", { class: "readout", "aria-live": "polite" }, readout),
    h("details", { class: "numbers" }, h("summary", {}, `${title}: the numbers`), numbers),
    hint ? h("p", { class: "hint" }, hint) : null);
}

/** Values over time, one line per series: `buckets` (Dates), `series` [{name, values}]. */
export function timeChart({ title, buckets, series, unit = "", label = (d) => d.toISOString() }) {
  charts += 1;
  const height = 240;
  const plotW = WIDTH - PLOT.left - PLOT.right;
  const plotH = height - PLOT.top - PLOT.bottom;
  const top = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
  const x = (i) => PLOT.left + (buckets.length > 1 ? (i * plotW) / (buckets.length - 1) : plotW / 2);
  const y = (v) => PLOT.top + plotH - (v / top) * plotH;
  const root = svg("svg", {
    class: "plot", viewBox: `0 0 ${WIDTH} ${height}`, width: "100%", tabindex: 0, role: "group",
    "aria-label": `${title}. Arrow keys read each point in time.`, "data-chart": "time",
  });
  const grid = svg("g", { class: "grid", "aria-hidden": "true" });
  for (let k = 0; k <= 4; k += 1) {
    const v = (top * k) / 4;
    append(grid, svg("line", { x1: PLOT.left, x2: WIDTH - PLOT.right, y1: y(v), y2: y(v) }),
      svg("text", { x: PLOT.left - 6, y: y(v) + 4, "text-anchor": "end" }, formatNumber(v)));
  }
  const every = Math.max(1, Math.ceil(buckets.length / 8));
  buckets.forEach((b, i) => {
    if (i % every === 0) append(grid, svg("text", { x: x(i), y: height - 12, "text-anchor": "middle" }, label(b)));
  });
  const cursor = svg("line", { class: "cursor", x1: 0, x2: 0, y1: PLOT.top, y2: PLOT.top + plotH, visibility: "hidden" });
  const marks = series.map((s, si) => {
    const { colour, dash, marker: shape } = styleOf(si);
    const points = s.values.map((v, i) => `${x(i)},${y(v)}`).join(" ");
    return svg("g", { class: "series", "data-series": s.name },
      svg("polyline", { points, fill: "none", stroke: colour, "stroke-width": 2, "stroke-dasharray": dash || null }),
      s.values.map((v, i) => marker(shape, x(i), y(v), colour, {
        class: "mark", "data-series": s.name, "data-bucket": i, "data-value": v,
      })));
  });
  marks.forEach((g, si) => g.querySelectorAll(".mark").forEach((m, i) => {
    m.append(svg("title", {}, `${series[si].name}, ${label(buckets[i])}: ${formatNumber(series[si].values[i], unit)}`));
  }));
  append(root, grid, marks, cursor);
  const readout = h("span", {}, series.length ? "" : "Nothing in this window.");
  walkable(root, buckets.length, (i) => {
    cursor.setAttribute("x1", x(i));
    cursor.setAttribute("x2", x(i));
    cursor.setAttribute("visibility", "visible");
    return `${label(buckets[i])}: ${series.map((s) => `${s.name} ${formatNumber(s.values[i], unit)}`).join("; ")}`;
  }, readout);
  const numbers = table(title, ["Time", ...series.map((s) => s.name)],
    buckets.map((b, i) => [label(b), ...series.map((s) => formatNumber(s.values[i]))]));
  return frame(title, null, root, readout, legend(series, lineSwatch), numbers);
}

/** Horizontal bars: one row per `rows` item ({name, values: [...], note?}), one bar per measure
 * (`measures`: [{name, unit}]), each measure its own fill pattern, its value written at its end
 * (and the row's `note` after the last). */
export function barChart({ title, rows, measures }) {
  charts += 1;
  const barH = 12;
  const rowH = measures.length * (barH + 3) + 10;
  const labelW = 210;
  const height = PLOT.top + rows.length * rowH + 8;
  const plotW = WIDTH - labelW - 90;
  const top = niceMax(Math.max(0, ...rows.flatMap((r) => r.values.map((v) => v ?? 0))));
  const { defs, fills } = patterns(`c${charts}`, measures.length);
  const root = svg("svg", {
    class: "plot", viewBox: `0 0 ${WIDTH} ${Math.max(height, 40)}`, width: "100%", tabindex: 0, role: "group",
    "aria-label": `${title}. Arrow keys read each row.`, "data-chart": "bars",
  }, defs);
  const cursor = svg("rect", { class: "cursor", x: 2, width: WIDTH - 4, height: rowH - 4, visibility: "hidden", fill: "none" });
  rows.forEach((row, ri) => {
    const y0 = PLOT.top + ri * rowH;
    const name = row.name.length > 32 ? `${row.name.slice(0, 31)}…` : row.name;
    append(root, svg("text", { x: labelW - 8, y: y0 + rowH / 2, "text-anchor": "end", class: "label" }, name,
      svg("title", {}, row.name)));
    row.values.forEach((v, mi) => {
      const y1 = y0 + mi * (barH + 3);
      const w = v === null || v === undefined ? 0 : Math.max(1, (v / top) * plotW);
      append(root,
        svg("rect", {
          class: "mark", x: labelW, y: y1, width: w, height: barH, fill: fills[mi], stroke: styleOf(mi).colour,
          "data-series": measures[mi].name, "data-row": row.name, "data-value": v ?? "",
        }, svg("title", {}, `${row.name}, ${measures[mi].name}: ${formatNumber(v, measures[mi].unit)}`)),
        svg("text", { x: labelW + w + 6, y: y1 + barH - 2, class: "value" },
          `${measures[mi].name} ${formatNumber(v, measures[mi].unit)}`,
          row.note && mi === measures.length - 1 ? ` (${row.note})` : null));
    });
  });
  append(root, cursor);
  const readout = h("span", {}, rows.length ? "" : "Nothing in this window.");
  walkable(root, rows.length, (i) => {
    cursor.setAttribute("y", PLOT.top + i * rowH - 2);
    cursor.setAttribute("visibility", "visible");
    return `${rows[i].name}: ${measures.map((m, mi) => `${m.name} ${formatNumber(rows[i].values[mi], m.unit)}`).join("; ")}`;
  }, readout);
  const notes = rows.some((r) => r.note);
  const numbers = table(title, ["", ...measures.map((m) => (m.unit ? `${m.name} (${m.unit})` : m.name)), notes ? "" : null].filter((c) => c !== null),
    rows.map((r) => [r.name, ...r.values.map((v) => formatNumber(v)), notes ? r.note || "" : null].filter((c) => c !== null)));
  return frame(title, null, root, readout, legend(measures, barSwatch(fills)), numbers);
}

/** A run's steps on one time axis, as a trace viewer shows spans: `rows` [{name, start, duration,
 * outcome: "ok"|"error"|"waiting", note}] in ms from the run's start; `total` the run's length.
 * Outcomes differ by fill pattern and are written beside each bar. */
export function waterfall({ title, total, rows }) {
  charts += 1;
  const rowH = 22;
  const labelW = 230;
  const height = PLOT.top + rows.length * rowH + 30;
  const plotW = WIDTH - labelW - 150;
  const end = Math.max(total, ...rows.map((r) => r.start + r.duration), 1);
  const x = (ms) => labelW + (ms / end) * plotW;
  const outcomes = ["ok", "error", "waiting"];
  const { defs, fills } = patterns(`w${charts}`, outcomes.length);
  const fillOf = (outcome) => fills[Math.max(0, outcomes.indexOf(outcome))];
  const root = svg("svg", {
    class: "plot waterfall", viewBox: `0 0 ${WIDTH} ${height}`, width: "100%", tabindex: 0, role: "group",
    "aria-label": `${title}. Arrow keys read each step.`, "data-chart": "waterfall",
  }, defs);
  const axisY = PLOT.top + rows.length * rowH + 4;
  const grid = svg("g", { class: "grid", "aria-hidden": "true" },
    svg("line", { x1: labelW, x2: labelW + plotW, y1: axisY, y2: axisY }));
  for (let k = 0; k <= 4; k += 1) {
    const ms = (end * k) / 4;
    append(grid, svg("line", { x1: x(ms), x2: x(ms), y1: PLOT.top, y2: axisY }),
      svg("text", { x: x(ms), y: axisY + 16, "text-anchor": "middle" }, formatNumber(ms, "ms")));
  }
  append(root, grid);
  const cursor = svg("rect", { class: "cursor", x: 2, width: WIDTH - 4, height: rowH, visibility: "hidden", fill: "none" });
  rows.forEach((row, i) => {
    const y = PLOT.top + i * rowH;
    const name = row.name.length > 34 ? `${row.name.slice(0, 33)}…` : row.name;
    const words = `${formatNumber(row.duration, "ms")} ${row.outcome}${row.note ? `, ${row.note}` : ""}`;
    append(root,
      svg("text", { x: labelW - 8, y: y + 15, "text-anchor": "end", class: "label" }, name, svg("title", {}, row.name)),
      svg("rect", {
        class: "mark", x: x(row.start), y: y + 3, width: Math.max(2, x(row.start + row.duration) - x(row.start)), height: rowH - 6,
        fill: fillOf(row.outcome), stroke: styleOf(Math.max(0, outcomes.indexOf(row.outcome))).colour,
        "data-row": row.name, "data-start": row.start, "data-value": row.duration, "data-outcome": row.outcome,
      }, svg("title", {}, `${row.name}: from ${formatNumber(row.start, "ms")}, ${words}`)),
      svg("text", { x: x(row.start + row.duration) + 6, y: y + 15, class: "value" },
        words.length > 40 ? `${words.slice(0, 39)}…` : words));
  });
  append(root, cursor);
  const readout = h("span", {}, "");
  walkable(root, rows.length, (i) => {
    cursor.setAttribute("y", PLOT.top + i * rowH);
    cursor.setAttribute("visibility", "visible");
    const r = rows[i];
    return `${r.name}: starts at ${formatNumber(r.start, "ms")}, takes ${formatNumber(r.duration, "ms")}, ${r.outcome}${r.note ? ` (${r.note})` : ""}`;
  }, readout);
  const numbers = table(title, ["Step", "Starts at (ms)", "Duration (ms)", "Outcome", "Note"],
    rows.map((r) => [r.name, formatNumber(r.start), formatNumber(r.duration), r.outcome, r.note || ""]));
  return frame(title, null, root, readout, legend(outcomes.map((o) => ({ name: o })), barSwatch(fills)), numbers);
}
