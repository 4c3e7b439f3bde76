// #/chat: POST /chat with stream: true; each server-sent event is drawn as it arrives (the
// model's text, each tool call, its progress and its result, iterations). A chat that stops
// with `approval_required` shows the waiting calls; the person's decisions go back as the
// public API takes them: the answer's `messages` with `approvals`, the same tool selection.
import { stream } from "../api.js";
import { append, asText, button, clear, count, field, h, splitList } from "../dom.js";
import { decisionForm, eventLog } from "./chat-events.js";

export const chatPage = {
  id: "chat",
  title: "Chat",
  hash: "chat",
  roles: ["tenant", "client"],
  async render(main, params, ctx) {
    let history = [];
    let selection = {}; // the tool_ids and context_arguments of the conversation's last request
    const message = h("textarea", { name: "message", rows: 3, cols: 80, required: true });
    const toolIds = h("input", { name: "tool_ids", placeholder: "rolldice" });
    const contextArgs = h("textarea", { name: "context_arguments", rows: 2, cols: 80, class: "code", placeholder: '{"user_id": "u-42"}' });
    const transcript = h("ol", { class: "transcript", "aria-label": "Conversation" });
    const eventList = h("ol", { class: "events", "aria-label": "Events", "aria-live": "polite" });
    const events = eventLog(eventList);
    const problem = h("div");
    const decisions = h("div", { "aria-live": "polite" });
    const send = h("button", { type: "submit" }, "Send");
    const say = (role, text) => append(transcript, h("li", { class: `turn ${role}` }, h("strong", {}, `${role}: `), text));

    const decide = async (approvals) => {
      const shown = approvals.map((a) => `${a.approved ? "Approved" : "Refused"} ${a.tool}`
        + (a.reason ? ` (${a.reason})` : "")).join("; ");
      say("person", shown);
      await run({ ...selection, messages: history, approvals, stream: true });
    };
    const run = async (body) => {
      clear(problem);
      events.clear();
      const answer = h("span", { class: "answer" });
      say("assistant", answer);
      send.disabled = true;
      // Calls that wait keep waiting until a continuation is accepted (its stream starts): a
      // refused one (a 422) leaves the decision form as it was.
      let waiting = Boolean(body.approvals);
      let started = false;
      try {
        for await (const { event: name, data } of stream("/chat", body)) {
          if (!started) {
            started = true;
            waiting = false;
            clear(decisions);
          }
          if (name === "message.delta") answer.textContent += asText(data.content);
          events.add(name, data);
          if (name === "done") {
            history = data.messages || [];
            answer.textContent = asText(data.message?.content);
            waiting = data.stop_reason === "approval_required";
            if (waiting) {
              const pending = data.pending_approvals || [];
              answer.textContent = `(waiting for a decision on ${pending.map((p) => asText(p.tool)).join(", ")})`;
              append(decisions, decisionForm(pending, decide));
              ctx.status(`Waiting for a decision on ${count(pending.length, "call")}; run ${data.run_id}.`);
            } else {
              ctx.status(`Answered in ${data.iterations} model calls; run ${data.run_id}.`);
            }
          }
          if (name === "error") ctx.error(new Error(asText(data.detail ?? data.title)), problem);
        }
      } catch (error) {
        ctx.error(error, problem);
      } finally {
        // While calls wait, a new message would leave them unanswered: decide, or start over.
        send.disabled = waiting;
      }
    };
    const submit = async (event) => {
      event.preventDefault();
      const text = message.value.trim();
      if (!text) return;
      const next = {};
      try {
        if (splitList(toolIds.value).length) next.tool_ids = splitList(toolIds.value);
        if (contextArgs.value.trim()) next.context_arguments = JSON.parse(contextArgs.value);
      } catch (error) {
        ctx.error(new Error(`Context arguments are not valid JSON: ${error.message}`), problem);
        return;
      }
      selection = next;
      say("user", text);
      message.value = "";
      await run({ ...selection, messages: [...history, { role: "user", content: text }], stream: true });
    };
    append(main, h("h1", {}, "Chat"),
      h("form", { class: "card", onsubmit: submit },
        field("Message", message),
        field("Only these tool ids (comma-separated; default: every enabled tool)", toolIds),
        field("Context arguments (JSON object)", contextArgs, "Values the tools get and the model never sees."),
        h("p", {}, send, " ", button("New conversation", () => {
          history = [];
          selection = {};
          clear(transcript);
          clear(decisions);
          events.clear();
          send.disabled = false;
          ctx.status("A new conversation.");
        }))),
      problem, decisions,
      h("h2", {}, "Conversation"), transcript,
      h("h2", {}, "Events"), eventList);
  },
};
