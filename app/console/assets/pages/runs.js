// #/runs and #/runs/<run_id>: run records, newest first, a page at a time (next_cursor).
import { api } from "../api.js";
import { append, asText, button, clear, count, field, h, json, table, when } from "../dom.js";

function runRow(run) {
  const calls = (run.tool_calls || []).map((c) => `${c.name} (${c.status})`).join(", ");
  return [
    h("a", { href: `#/runs/${encodeURIComponent(run.run_id)}` }, asText(run.run_id)),
    asText(run.kind), when(run.started_at), asText(run.stop_reason), String(run.iterations),
    calls, String(run.usage?.total_tokens ?? ""),
  ];
}

async function detail(main, runId) {
  const run = await api("GET", `/runs/${encodeURIComponent(runId)}`);
  append(main, h("h1", {}, `Run ${runId}`),
    h("p", {}, h("a", { href: "#/runs" }, "All runs")),
    h("dl", { class: "stats" },
      h("dt", {}, "Kind"), h("dd", {}, asText(run.kind)),
      h("dt", {}, "Started"), h("dd", {}, when(run.started_at)),
      h("dt", {}, "Ended"), h("dd", {}, when(run.ended_at)),
      h("dt", {}, "Model"), h("dd", {}, asText(run.model) || "-"),
      h("dt", {}, "Stop reason"), h("dd", {}, asText(run.stop_reason)),
      run.error ? [h("dt", {}, "Error"), h("dd", {}, asText(run.error))] : null,
      h("dt", {}, "Tokens"), h("dd", {}, String(run.usage?.total_tokens ?? 0))),
    table("Tool calls", ["Call", "Function", "Tool id", "Status", "Duration", "Arguments"],
      (run.tool_calls || []).map((c) => [asText(c.id), asText(c.name), asText(c.tool_id),
        asText(c.status), `${c.duration_ms} ms`, h("code", {}, asText(c.arguments))])),
    run.messages ? [h("h2", {}, "Messages"), h("pre", { class: "output" }, json(run.messages))] : null);
}

export const runsPage = {
  id: "runs",
  title: "Runs",
  hash: "runs",
  roles: ["tenant"],
  async render(main, params, ctx) {
    if (params[0]) {
      await detail(main, params[0]);
      return;
    }
    const toolId = h("input", { name: "tool_id" });
    const status = h("select", { name: "status" }, h("option", { value: "" }, "any"),
      ["completed", "error", "max_iterations", "cancelled", "token_budget"].map((s) => h("option", { value: s }, s)));
    const rows = [];
    const body = h("div", { "aria-live": "polite" });
    let cursor = null;
    let latest = 0; // only the newest load shows: two in flight would both add their rows
    const load = async (more) => {
      const mine = ++latest;
      const query = new URLSearchParams({ limit: "50" });
      if (toolId.value.trim()) query.set("tool_id", toolId.value.trim());
      if (status.value) query.set("status", status.value);
      if (more && cursor) query.set("cursor", cursor);
      try {
        const page = await api("GET", `/runs?${query}`);
        if (mine !== latest) return;
        if (!more) rows.length = 0;
        rows.push(...page.items.map(runRow));
        cursor = page.next_cursor;
        append(clear(body),
          table(count(rows.length, "run"), ["Run", "Kind", "Started", "Ended as", "Model calls", "Tool calls", "Tokens"], rows),
          cursor ? button("Load more", () => load(true)) : null);
      } catch (error) {
        if (mine === latest) ctx.error(error, body);
      }
    };
    append(main, h("h1", {}, "Runs"),
      h("form", { class: "filters", onsubmit: (event) => { event.preventDefault(); load(false); } },
        field("Tool id", toolId), field("Ended as", status), h("button", { type: "submit" }, "Show runs")),
      body);
    await load(false);
  },
};
