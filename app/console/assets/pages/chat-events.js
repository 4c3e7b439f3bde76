// How a streamed chat's events read in the Events list, and the decision form for calls that
// wait for a person (`approval_required`). Every value is set as text.
import { append, asText, clear, field, h, uid } from "../dom.js";

const percent = (fraction) => (typeof fraction === "number" ? `${Math.round(fraction * 100)}%` : "");

// How each event reads; anything without an entry (a newer service's events) is shown by name
// and data.
export const DESCRIBE = {
  iteration: (d) => `Model call ${d.n}`,
  "message.delta": (d) => asText(d.content),
  tool_call: (d) => `Tool call ${asText(d.name)} ${asText(d.arguments)}`,
  tool_result: (d) => `Result ${asText(d.status)} in ${d.duration_ms} ms: ${asText(d.preview ?? d.error)}`,
  approval_required: (d) => `Waiting for a person: ${(d.pending || [])
    .map((p) => `${asText(p.tool)} ${asText(p.arguments)} (${asText(p.id)})`).join("; ")}`,
  mcp_server_skipped: (d) => `MCP server ${asText(d.name)} skipped: ${asText(d.reason)}`,
  done: (d) => `Done (${asText(d.stop_reason)}), run ${asText(d.run_id)}`,
  error: (d) => `Error: ${asText(d.detail ?? d.title ?? d)}`,
};

export function eventItem(event, data) {
  const describe = DESCRIBE[event];
  return h("li", { class: `event event-${event.replace(/[^a-z_]/g, "-")}` },
    h("span", { class: "event-name" }, event), " ",
    describe ? describe(data) : asText(data));
}

/** The Events list: one line per event, except a call's progress reports, which update one
 * line of their own (a tool may report many times). */
export function eventLog(list) {
  const calls = new Map(); // call id -> {name, line}
  return {
    clear() {
      calls.clear();
      clear(list);
    },
    add(event, data) {
      if (event === "tool_call") calls.set(data.id, { name: asText(data.name) });
      if (event !== "tool_progress") {
        append(list, eventItem(event, data));
        return;
      }
      const call = calls.get(data.id) || { name: asText(data.id) };
      calls.set(data.id, call);
      call.reports = (call.reports || 0) + 1;
      const bar = typeof data.fraction === "number"
        ? h("progress", { max: "1", value: String(data.fraction), "aria-label": `Progress of ${call.name}` })
        : null;
      const line = h("li", { class: "event event-tool_progress" },
        h("span", { class: "event-name" }, "tool_progress"), " ",
        `${call.name}: ${asText(data.message)}`, bar ? " " : null, bar,
        bar ? ` ${percent(data.fraction)}` : null, call.reports > 1 ? ` (report ${call.reports})` : null);
      if (call.line) call.line.replaceWith(line);
      else append(list, line);
      call.line = line;
    },
  };
}

/** For each waiting call: its tool and arguments as the model sent them, approve or refuse, a
 * reason. `decide(approvals)` gets one decision per call, with the tool and arguments the
 * person saw (the service refuses them if the conversation changed in between). */
export function decisionForm(pending, decide) {
  const choices = pending.map((call) => {
    const group = uid("decision");
    const approve = h("input", { type: "radio", name: group, value: "approve" });
    const refuse = h("input", { type: "radio", name: group, value: "refuse" });
    const reason = h("input", { name: `${group}-reason`, maxlength: "2000", autocomplete: "off" });
    const node = h("fieldset", { class: "decision" },
      h("legend", {}, `${asText(call.tool)} (${asText(call.id)})`),
      h("pre", { class: "output", "aria-label": `Arguments of ${asText(call.tool)}` },
        JSON.stringify(call.arguments ?? {}, null, 2)),
      h("div", { class: "actions" },
        h("label", { class: "inline" }, approve, ` Approve ${asText(call.tool)}`),
        h("label", { class: "inline" }, refuse, ` Refuse ${asText(call.tool)}`)),
      field(`Reason for ${asText(call.tool)} (optional; a refusal's reason is what the model reads)`, reason));
    const read = () => {
      if (!approve.checked && !refuse.checked) return null;
      const decision = { call_id: call.id, approved: approve.checked, tool: call.tool, arguments: call.arguments ?? {} };
      if (reason.value.trim()) decision.reason = reason.value.trim();
      return decision;
    };
    return { node, read };
  });
  const problem = h("div", { "aria-live": "polite" });
  const send = h("button", { type: "submit" }, "Send decisions");
  const form = h("form", { class: "card", onsubmit: async (event) => {
    event.preventDefault();
    const approvals = choices.map((c) => c.read());
    if (approvals.includes(null)) {
      append(clear(problem), h("p", { class: "problem", role: "alert" },
        "Approve or refuse every waiting call: the service takes all the decisions at once."));
      return;
    }
    clear(problem);
    send.disabled = true;
    try {
      await decide(approvals);
    } finally {
      send.disabled = false;
    }
  } },
  h("h2", {}, pending.length === 1 ? "A call waits for your decision" : `${pending.length} calls wait for your decision`),
  h("p", { class: "hint" }, "Nothing of this turn has run. Approved calls run; a refused call goes "
    + "to the model as an error with your reason."),
  choices.map((c) => c.node), problem, send);
  return h("section", { "aria-label": "Approvals" }, form);
}
