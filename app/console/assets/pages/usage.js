// #/usage: the tenant's usage at a glance, from GET /usage (the database's aggregation over run
// records): tool calls and failures over time, latency per tool, the slowest and the most
// failing tools, and model calls and tokens per provider and model per day. Every chart has its
// numbers as a table, and the tools' numbers are a table of their own.
import { api } from "../api.js";
import { barChart, formatNumber, timeChart } from "../charts.js";
import { append, clear, field, h, table } from "../dom.js";

const WINDOWS = {
  hour: { label: "Last hour", ms: 3_600_000, bucket: "1m" },
  day: { label: "Last day", ms: 86_400_000, bucket: "1h" },
  week: { label: "Last week", ms: 7 * 86_400_000, bucket: "6h" },
};
const MODEL_DAYS = 7;

function percent(rate) {
  return `${formatNumber(rate * 100)}%`;
}

/** A bucket's start as people read it: the time of day, with the date when the window spans
 * days; the date alone for whole days. */
function labeller(bucketS, spanMs) {
  const time = { hour: "2-digit", minute: "2-digit", hour12: false };
  const date = { month: "short", day: "numeric" };
  const options = bucketS >= 86_400 ? date : spanMs > 86_400_000 ? { ...date, ...time } : time;
  const format = new Intl.DateTimeFormat("en-GB", options);
  return (when) => format.format(when);
}

function query(params) {
  return `/usage?${new URLSearchParams(params)}`;
}

function toolSections(usage, span) {
  const buckets = usage.buckets.map((b) => new Date(b));
  const label = labeller(usage.bucket_s, span);
  const series = (measure) => usage.series.map((s) => ({ name: s.key, values: s[measure] }));
  const timed = usage.keys.filter((k) => k.p50_ms !== undefined && k.p50_ms !== null);
  const { totals } = usage;
  return [
    h("dl", { class: "stats totals", "aria-label": "Tool calls in the window" },
      h("dt", {}, "Tool calls"), h("dd", {}, String(totals.calls)),
      h("dt", {}, "Failed"), h("dd", {}, String(totals.errors)),
      h("dt", {}, "Error rate"), h("dd", {}, percent(totals.error_rate)),
      h("dt", {}, "Tools used"), h("dd", {}, String(totals.keys))),
    timeChart({ title: "Tool calls over time", buckets, series: series("calls"), unit: "calls", label }),
    timeChart({ title: "Failed tool calls over time", buckets, series: series("errors"), unit: "failed", label }),
    barChart({
      title: "Latency per tool",
      rows: timed.map((k) => ({ name: k.key, values: [k.p50_ms, k.p95_ms] })),
      measures: [{ name: "p50", unit: "ms" }, { name: "p95", unit: "ms" }],
    }),
    barChart({
        title: "The ten slowest tools (p95)",
        rows: usage.slowest.map((k) => ({ name: k.key, values: [k.p95_ms] })),
        measures: [{ name: "p95", unit: "ms" }],
      }),
      barChart({
        title: "The ten most failing tools",
        rows: usage.failing.map((k) => ({ name: k.key, values: [k.errors], note: `${percent(k.error_rate)} of ${k.calls}` })),
        measures: [{ name: "failed", unit: "" }],
      }),
    table("Tools", ["Tool", "Calls", "Failed", "Error rate", "p50", "p95"],
      usage.keys.map((k) => [k.key, String(k.calls), String(k.errors), percent(k.error_rate),
        formatNumber(k.p50_ms, "ms"), formatNumber(k.p95_ms, "ms")])),
  ];
}

function modelSections(usage) {
  const buckets = usage.buckets.map((b) => new Date(b));
  const label = labeller(usage.bucket_s, MODEL_DAYS * 86_400_000);
  const series = (measure) => usage.series.map((s) => ({ name: s.key, values: s[measure] }));
  return [
    h("h2", {}, `Models, per day (the last ${MODEL_DAYS} days)`),
    h("dl", { class: "stats totals", "aria-label": "Model use in the last days" },
      h("dt", {}, "Chats"), h("dd", {}, String(usage.totals.runs ?? 0)),
      h("dt", {}, "Model calls"), h("dd", {}, String(usage.totals.calls)),
      h("dt", {}, "Tokens"), h("dd", {}, String(usage.totals.total_tokens ?? 0)),
      h("dt", {}, "Chats ended in error"), h("dd", {}, String(usage.totals.errors))),
    timeChart({ title: "Model calls per day", buckets, series: series("calls"), unit: "calls", label }),
    timeChart({ title: "Tokens per day", buckets, series: series("total_tokens"), unit: "tokens", label }),
    table("Models", ["Provider and model", "Chats", "Model calls", "Prompt tokens", "Completion tokens", "Tokens", "Chats ended in error"],
      usage.keys.map((k) => [k.key, String(k.runs), String(k.calls), String(k.prompt_tokens),
        String(k.completion_tokens), String(k.total_tokens), String(k.errors)])),
  ];
}

export const usagePage = {
  id: "usage",
  title: "Usage",
  hash: "usage",
  roles: ["tenant"],
  probe: "/usage?bucket=1d",
  async render(main, params, ctx) {
    const choice = h("select", { name: "window" },
      Object.entries(WINDOWS).map(([value, w]) => h("option", { value }, w.label)));
    choice.value = WINDOWS[params[0]] ? params[0] : "day";
    const body = h("div", { "aria-live": "polite" });
    const load = async () => {
      const span = WINDOWS[choice.value];
      const now = Date.now();
      const since = new Date(now - span.ms).toISOString();
      const models = new Date(now - MODEL_DAYS * 86_400_000).toISOString();
      try {
        const [tools, perModel] = await Promise.all([
          api("GET", query({ by: "tool", since, bucket: span.bucket, limit: "10" })),
          api("GET", query({ by: "model", since: models, bucket: "1d", limit: "10" })),
        ]);
        append(clear(body), h("h2", {}, `Tools, ${span.label.toLowerCase()}`),
          toolSections(tools, span.ms), modelSections(perModel));
        ctx.status(`Usage of the ${span.label.toLowerCase()}: ${tools.totals.calls} tool calls, ${perModel.totals.calls} model calls.`);
      } catch (error) {
        ctx.error(error, body);
      }
    };
    append(main, h("h1", {}, "Usage"),
      h("p", {}, "Counted by the service from its run records (chats, invokes and MCP calls). "
        + "Each chart's numbers are in a table below it; a chart takes the focus, and the arrow keys read it."),
      h("form", { class: "filters", onsubmit: (event) => { event.preventDefault(); return load(); } },
        field("Window", choice), h("button", { type: "submit" }, "Show usage")),
      body);
    await load();
  },
};
