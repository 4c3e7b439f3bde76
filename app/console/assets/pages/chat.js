// #/chat: POST /chat with stream: true; each server-sent event is drawn as it arrives (the
// model's text, each tool call and its result, iterations). Events this page does not know
// (approval requests, progress, anything a newer service sends) are shown by name and data.
import { stream } from "../api.js";
import { append, asText, button, clear, field, h, splitList } from "../dom.js";

// How each event reads; a page for a newer service's events (approval requests, progress) adds
// its own entry here, and anything without one is shown by name and data.
export const DESCRIBE = {
  iteration: (d) => `Model call ${d.n}`,
  "message.delta": (d) => asText(d.content),
  tool_call: (d) => `Tool call ${asText(d.name)} ${asText(d.arguments)}`,
  tool_result: (d) => `Result ${asText(d.status)} in ${d.duration_ms} ms: ${asText(d.preview ?? d.error)}`,
  mcp_server_skipped: (d) => `MCP server ${asText(d.name)} skipped: ${asText(d.reason)}`,
  done: (d) => `Done (${asText(d.stop_reason)}), run ${asText(d.run_id)}`,
  error: (d) => `Error: ${asText(d.detail ?? d.title ?? d)}`,
};

function eventItem(event, data) {
  const describe = DESCRIBE[event];
  return h("li", { class: `event event-${event.replace(/[^a-z_]/g, "-")}` },
    h("span", { class: "event-name" }, event), " ",
    describe ? describe(data) : asText(data));
}

export const chatPage = {
  id: "chat",
  title: "Chat",
  hash: "chat",
  roles: ["tenant", "client"],
  async render(main, params, ctx) {
    let history = [];
    const message = h("textarea", { name: "message", rows: 3, cols: 80, required: true });
    const toolIds = h("input", { name: "tool_ids", placeholder: "rolldice" });
    const contextArgs = h("textarea", { name: "context_arguments", rows: 2, cols: 80, class: "code", placeholder: '{"user_id": "u-42"}' });
    const transcript = h("ol", { class: "transcript", "aria-label": "Conversation" });
    const events = h("ol", { class: "events", "aria-label": "Events", "aria-live": "polite" });
    const problem = h("div");
    const send = h("button", { type: "submit" }, "Send");
    const say = (role, text) => append(transcript, h("li", { class: `turn ${role}` }, h("strong", {}, `${role}: `), text));
    const submit = async (event) => {
      event.preventDefault();
      const text = message.value.trim();
      if (!text) return;
      const body = { messages: [...history, { role: "user", content: text }], stream: true };
      try {
        if (splitList(toolIds.value).length) body.tool_ids = splitList(toolIds.value);
        if (contextArgs.value.trim()) body.context_arguments = JSON.parse(contextArgs.value);
      } catch (error) {
        ctx.error(new Error(`Context arguments are not valid JSON: ${error.message}`), problem);
        return;
      }
      clear(problem);
      clear(events);
      say("user", text);
      message.value = "";
      const answer = h("span", { class: "answer" });
      say("assistant", answer);
      send.disabled = true;
      try {
        for await (const { event: name, data } of stream("/chat", body)) {
          if (name === "message.delta") answer.textContent += asText(data.content);
          append(events, eventItem(name, data));
          if (name === "done") {
            history = data.messages || [];
            answer.textContent = asText(data.message?.content);
            ctx.status(`Answered in ${data.iterations} model calls; run ${data.run_id}.`);
          }
          if (name === "error") ctx.error(new Error(asText(data.detail ?? data.title)), problem);
        }
      } catch (error) {
        ctx.error(error, problem);
      } finally {
        send.disabled = false;
      }
    };
    append(main, h("h1", {}, "Chat"),
      h("form", { class: "card", onsubmit: submit },
        field("Message", message),
        field("Only these tool ids (comma-separated; default: every enabled tool)", toolIds),
        field("Context arguments (JSON object)", contextArgs, "Values the tools get and the model never sees."),
        h("p", {}, send, " ", button("New conversation", () => {
          history = [];
          clear(transcript);
          clear(events);
          ctx.status("A new conversation.");
        }))),
      problem,
      h("h2", {}, "Conversation"), transcript,
      h("h2", {}, "Events"), events);
  },
};
