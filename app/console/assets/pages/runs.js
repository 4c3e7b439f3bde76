// #/runs and #/runs/<run_id>: run records, newest first, a page at a time (next_cursor); a run
// as a timeline of its model and tool calls, then its messages when the service stores them.
import { api } from "../api.js";
import { waterfall } from "../charts.js";
import { append, asText, button, clear, count, field, h, table, when } from "../dom.js";

function runRow(run) {
  const calls = (run.tool_calls || []).map((c) => `${c.name} (${c.status})`).join(", ");
  return [
    h("a", { href: `#/runs/${encodeURIComponent(run.run_id)}` }, asText(run.run_id)),
    asText(run.kind), when(run.started_at), asText(run.stop_reason), String(run.iterations),
    calls, String(run.usage?.total_tokens ?? ""),
  ];
}

/** The run's steps in time: model calls and tool calls from the run's start, and the wait for
 * a person when the chat stopped for one. Records written before start times were kept list
 * their tool calls one after the other, and say so. */
export function timelineRows(run) {
  const total = Math.max(0, new Date(run.ended_at) - new Date(run.started_at));
  const rows = (run.model_calls || []).map((m, i) => ({
    name: `model call ${i + 1}${run.model ? ` (${run.model})` : ""}`, start: m.started_ms, duration: m.duration_ms,
    outcome: m.status, note: m.total_tokens === undefined ? "" : `${m.total_tokens} tokens`,
  }));
  const calls = run.tool_calls || [];
  const timed = calls.every((c) => typeof c.started_ms === "number");
  let next = 0;
  for (const c of calls) {
    const start = timed ? c.started_ms : next;
    next = start + c.duration_ms;
    const decided = c.approval ? `${c.approval.approved ? "approved" : "refused"} by a person${c.approval.reason ? `: ${c.approval.reason}` : ""}` : "";
    rows.push({ name: `${c.name} (tool call)`, start, duration: c.duration_ms, outcome: c.status, note: decided });
  }
  rows.sort((a, b) => a.start - b.start);
  if (run.stop_reason === "approval_required") {
    const waiting = (run.approvals || []).filter((a) => a.decision === "pending").map((a) => a.tool);
    const at = Math.max(0, ...rows.map((r) => r.start + r.duration));
    rows.push({
      name: "waiting for a person", start: at, duration: Math.max(0, total - at), outcome: "waiting",
      note: `${waiting.join(", ") || "calls"} wait; a continuation is a run of its own`,
    });
  }
  return { total, rows, timed };
}

function messageView(message) {
  const calls = (message.tool_calls || []).map((c) => h("li", {}, h("code", {},
    `${asText(c.function?.name)}(${asText(c.function?.arguments)})`)));
  return h("li", { class: `message ${asText(message.role)}` },
    h("strong", {}, `${asText(message.role)}${message.tool_call_id ? ` (result of ${asText(message.tool_call_id)})` : ""}: `),
    h("span", { class: "description" }, asText(message.content)),
    calls.length ? h("ul", { "aria-label": "Tool calls asked for" }, calls) : null);
}

function messagesView(run) {
  if (Array.isArray(run.messages)) {
    return h("section", { "aria-label": "Messages" }, h("h2", {}, "Messages"),
      h("p", { class: "hint" }, "As stored: hidden values (context arguments, secrets, MCP header values) were redacted before storing."),
      h("ol", { class: "transcript" }, run.messages.map(messageView)));
  }
  return h("section", { "aria-label": "Messages" }, h("h2", {}, "Messages"),
    h("p", {}, run.kind === "chat"
      ? "This service does not store chat messages (RUN_STORE_MESSAGES is off): the tool calls' arguments above are what it kept."
      : "A tool invocation has no messages: its arguments are above."));
}

async function detail(main, runId) {
  const run = await api("GET", `/runs/${encodeURIComponent(runId)}`);
  const { total, rows, timed } = timelineRows(run);
  append(main, h("h1", {}, `Run ${runId}`),
    h("p", {}, h("a", { href: "#/runs" }, "All runs")),
    h("dl", { class: "stats" },
      h("dt", {}, "Kind"), h("dd", {}, asText(run.kind)),
      h("dt", {}, "Started"), h("dd", {}, when(run.started_at)),
      h("dt", {}, "Ended"), h("dd", {}, when(run.ended_at)),
      h("dt", {}, "Duration"), h("dd", {}, `${total} ms`),
      h("dt", {}, "Model"), h("dd", {}, asText(run.model) || "-"),
      h("dt", {}, "Stop reason"), h("dd", {}, asText(run.stop_reason)),
      run.error ? [h("dt", {}, "Error"), h("dd", {}, asText(run.error))] : null,
      h("dt", {}, "Tokens"), h("dd", {}, String(run.usage?.total_tokens ?? 0))),
    rows.length ? waterfall({ title: "Timeline", total, rows }) : h("p", {}, "Nothing ran in this run."),
    timed ? null : h("p", { class: "hint" }, "This record has no start times for its tool calls (it was written by an earlier version): they are drawn one after the other."),
    table("Tool calls", ["Call", "Function", "Tool id", "Status", "Starts at", "Duration", "Arguments"],
      (run.tool_calls || []).map((c) => [asText(c.id), asText(c.name), asText(c.tool_id),
        asText(c.status), typeof c.started_ms === "number" ? `${c.started_ms} ms` : "-", `${c.duration_ms} ms`,
        h("code", {}, asText(c.arguments))])),
    messagesView(run));
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
      h("form", { class: "filters", onsubmit: (event) => { event.preventDefault(); return load(false); } },
        field("Tool id", toolId), field("Ended as", status), h("button", { type: "submit" }, "Show runs")),
      body);
    await load(false);
  },
};
