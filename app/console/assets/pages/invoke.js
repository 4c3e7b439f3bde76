// #/invoke/<tool_id>: a form made from the tool's parameter schema (and its context
// parameters), then POST /tools/{id}/invoke: the result, the error kind and the duration.
import { api } from "../api.js";
import { append, asText, clear, field, h } from "../dom.js";

/** One control for a parameter schema; `read()` gives the typed value (undefined if empty). */
export function control(name, schema, required) {
  const label = `${name}${required ? " (required)" : ""}${schema.type ? `: ${schema.type}` : ""}`;
  const hint = asText(schema.description) || null;
  let input;
  let read;
  if (Array.isArray(schema.enum)) {
    input = h("select", { name }, required ? null : h("option", { value: "" }, "(not set)"),
      schema.enum.map((value, i) => h("option", { value: String(i) }, asText(value))));
    read = () => (input.value === "" ? undefined : schema.enum[Number(input.value)]);
  } else if (schema.type === "boolean") {
    input = h("select", { name }, h("option", { value: "" }, "(not set)"),
      h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
    read = () => (input.value === "" ? undefined : input.value === "true");
  } else if (schema.type === "integer" || schema.type === "number") {
    input = h("input", { type: "number", name, step: schema.type === "integer" ? "1" : "any", required });
    read = () => (input.value === "" ? undefined : Number(input.value));
  } else if (schema.type === "array" || schema.type === "object") {
    input = h("textarea", { name, rows: 3, class: "code", placeholder: schema.type === "array" ? '["a", "b"]' : "{}" });
    read = () => (input.value.trim() === "" ? undefined : JSON.parse(input.value));
  } else {
    input = h("input", { name, required });
    read = () => (input.value === "" ? undefined : input.value);
  }
  return { name, node: field(label, input, hint), read };
}

function collect(controls) {
  const values = {};
  for (const c of controls) {
    const value = c.read();
    if (value !== undefined) values[c.name] = value;
  }
  return values;
}

function resultView(run) {
  const ok = run.status === "ok";
  return h("section", { "aria-label": ok ? "Result" : "Error", class: ok ? "result ok" : "result bad" },
    h("h2", {}, ok ? "Result" : "Error"),
    h("dl", {},
      h("dt", {}, "Status"), h("dd", {}, asText(run.status)),
      run.error ? [h("dt", {}, "Error kind"), h("dd", {}, asText(run.error.kind))] : null,
      h("dt", {}, "Duration"), h("dd", {}, `${run.duration_ms} ms`),
      h("dt", {}, "Run"), h("dd", {}, h("a", { href: `#/runs/${encodeURIComponent(run.run_id)}` }, asText(run.run_id)))),
    h("pre", { class: "output" }, ok ? asText(run.content) : asText(run.error?.message)));
}

export const invokePage = {
  id: "invoke",
  title: "Invoke",
  hash: "invoke",
  roles: ["tenant"],
  nav: false,
  async render(main, params, ctx) {
    const toolId = params[0];
    const tool = await api("GET", `/tools/${encodeURIComponent(toolId)}`);
    const schema = tool.function?.parameters || {};
    const required = schema.required || [];
    const args = Object.entries(schema.properties || {}).map(
      ([name, s]) => control(name, s, required.includes(name)));
    const context = (tool.context_parameters || []).map((p) => control(p.name, p, false));
    const result = h("div", { "aria-live": "polite" });
    const submit = async (event) => {
      event.preventDefault();
      let body;
      try {
        body = { arguments: collect(args), context_arguments: collect(context) };
      } catch (error) {
        ctx.error(new Error(`An argument is not valid JSON: ${error.message}`), result);
        return;
      }
      try {
        const run = await api("POST", `/tools/${encodeURIComponent(toolId)}/invoke`, body);
        append(clear(result), resultView(run));
        ctx.status(`${toolId}: ${run.status} in ${run.duration_ms} ms.`);
      } catch (error) {
        ctx.error(error, result);
      }
    };
    append(main,
      h("h1", {}, `Invoke ${toolId}`),
      h("p", { class: "description" }, asText(tool.function?.description)),
      h("form", { class: "card", onsubmit: submit },
        h("fieldset", {}, h("legend", {}, "Arguments (what the model would send)"),
          args.length ? args.map((c) => c.node) : h("p", {}, "This tool takes no arguments.")),
        context.length
          ? h("fieldset", {}, h("legend", {}, "Context arguments (never shown to a model)"), context.map((c) => c.node))
          : null,
        h("button", { type: "submit" }, "Run the tool")),
      result);
  },
};
