// #/edit (a new tool) and #/edit/<tool_id>: the tool's JSON document, checked as it is typed,
// with a form for its parameters that writes into the same document. The service's answer is
// the last word: a 422 lists each problem with its JSON path.
import { api } from "../api.js";
import { append, asText, button, clear, field, h, json } from "../dom.js";

const NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const TYPES = ["string", "integer", "number", "boolean", "array"];
const SERVER_ONLY = ["created_at", "updated_at", "incompatible_providers"];
const TEMPLATE = {
  tool_id: "my-tool",
  type: "external",
  function: {
    name: "my_tool",
    description: "What the tool does, for the model.",
    parameters: { type: "object", properties: {}, required: [] },
    url: "https://api.example.com/endpoint",
    method: "GET",
  },
  context_parameters: [],
  tags: [],
};

/** Problems a person can fix before sending: the same shape the service answers with. */
export function checkTool(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (error) {
    return { doc: null, problems: [`$: not JSON (${error.message})`] };
  }
  const problems = [];
  const fn = doc && typeof doc === "object" ? doc.function : undefined;
  if (!doc || typeof doc !== "object" || Array.isArray(doc)) return { doc: null, problems: ["$: must be an object"] };
  if (!NAME.test(String(doc.tool_id ?? ""))) problems.push("$.tool_id: 1-64 letters, digits, _ or -");
  if (!["function", "external"].includes(doc.type)) problems.push('$.type: "function" or "external"');
  if (!fn || typeof fn !== "object") {
    problems.push("$.function: required (an object)");
    return { doc, problems };
  }
  if (!NAME.test(String(fn.name ?? ""))) problems.push("$.function.name: 1-64 letters, digits, _ or -");
  if (doc.type === "external" && !/^https?:\/\/\S+$/.test(String(fn.url ?? ""))) {
    problems.push("$.function.url: an http(s) URL is required for an external tool");
  }
  const params = fn.parameters || { properties: {}, required: [] };
  const properties = params.properties || {};
  for (const [name, schema] of Object.entries(properties)) {
    if (!NAME.test(name)) problems.push(`$.function.parameters.properties.${name}: not a valid name`);
    if (!TYPES.includes(schema?.type)) problems.push(`$.function.parameters.properties.${name}.type: one of ${TYPES.join(", ")}`);
  }
  (params.required || []).forEach((name, i) => {
    if (!(name in properties)) problems.push(`$.function.parameters.required[${i}]: '${name}' is required but not defined in properties`);
  });
  return { doc, problems };
}

function parameterRows(doc, onchange) {
  const params = doc.function.parameters ||= { type: "object", properties: {}, required: [] };
  params.properties ||= {};
  params.required ||= [];
  const rows = Object.entries(params.properties).map(([name, schema], index) => {
    const n = index + 1;
    const nameInput = h("input", { value: name, "aria-label": `Parameter ${n} name` });
    const type = h("select", { "aria-label": `Parameter ${n} type` }, TYPES.map((t) => h("option", { value: t }, t)));
    type.value = TYPES.includes(schema.type) ? schema.type : "string";
    const required = h("input", { type: "checkbox", checked: params.required.includes(name), "aria-label": `Parameter ${n} required` });
    const description = h("input", { value: asText(schema.description), "aria-label": `Parameter ${n} description` });
    const update = () => {
      const entries = Object.entries(params.properties).map(([key, value]) => (key === name
        ? [nameInput.value, { ...value, type: type.value, description: description.value || undefined }]
        : [key, value]));
      params.properties = Object.fromEntries(entries);
      params.required = params.required.filter((r) => r !== name);
      if (required.checked) params.required.push(nameInput.value);
      onchange();
    };
    for (const control of [nameInput, type, required, description]) control.addEventListener("change", update);
    const remove = button("Remove", () => {
      delete params.properties[name];
      params.required = params.required.filter((r) => r !== name);
      onchange();
    }, { "aria-label": `Remove parameter ${n}` });
    return h("tr", {}, [nameInput, type, required, description, remove].map((c) => h("td", {}, c)));
  });
  const add = button("Add parameter", () => {
    let n = Object.keys(params.properties).length + 1;
    while (`param${n}` in params.properties) n += 1;
    params.properties[`param${n}`] = { type: "string" };
    onchange();
  });
  return h("div", {},
    h("table", {}, h("caption", {}, "Parameters the model fills"),
      h("thead", {}, h("tr", {}, ["Name", "Type", "Required", "Description", ""].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows)),
    add);
}

export const editorPage = {
  id: "edit",
  title: "New tool",
  hash: "edit",
  roles: ["tenant"],
  nav: false,
  async render(main, params, ctx) {
    const existing = params[0] || null;
    let doc = TEMPLATE;
    if (existing) {
      doc = await api("GET", `/tools/${encodeURIComponent(existing)}`);
      for (const key of SERVER_ONLY) delete doc[key];
    }
    const editor = h("textarea", { rows: 22, cols: 90, spellcheck: "false", class: "code" });
    editor.value = json(doc);
    const problems = h("ul", { class: "problems", "aria-live": "polite" });
    const form = h("div");
    const answer = h("div", { "aria-live": "polite" });
    const save = h("button", { type: "submit" }, existing ? "Save changes" : "Create tool");
    const check = (redrawForm) => {
      const result = checkTool(editor.value);
      append(clear(problems), ...result.problems.map((p) => h("li", {}, p)));
      if (!result.problems.length) append(problems, h("li", { class: "ok" }, "No problems found."));
      save.disabled = result.doc === null;
      if (redrawForm && result.doc?.function && typeof result.doc.function === "object") {
        append(clear(form), parameterRows(result.doc, () => {
          editor.value = json(result.doc);
          check(true);
        }));
      }
      return result;
    };
    // The parameter form follows the document as it is typed: redrawn on "change" (the blur a
    // click on "Create tool" starts), it moved the button away before the click ended.
    editor.addEventListener("input", () => check(true));
    const submit = async (event) => {
      event.preventDefault();
      const { doc: body } = check(false);
      if (!body) return;
      try {
        const saved = existing
          ? await api("PUT", `/tools/${encodeURIComponent(existing)}`, body)
          : await api("POST", "/tools/create", body);
        ctx.status(`Saved ${saved.tool_id}.`);
        append(clear(answer), h("p", { class: "ok" }, `Saved ${saved.tool_id}. `,
          h("a", { href: `#/invoke/${encodeURIComponent(saved.tool_id)}` }, "Invoke it")));
        if (!existing) ctx.go(`#/edit/${encodeURIComponent(saved.tool_id)}`);
      } catch (error) {
        ctx.error(error, answer);
      }
    };
    append(main,
      h("h1", {}, existing ? `Edit ${existing}` : "New tool"),
      h("form", { class: "card", onsubmit: submit },
        field("Tool document (JSON)", editor, "Checked as you type; the service checks it again on save."),
        h("h2", {}, "Problems"), problems,
        h("h2", {}, "Parameters"), form,
        h("p", {}, save, " ", existing ? h("a", { href: `#/invoke/${encodeURIComponent(existing)}` }, "Invoke") : null)),
      answer);
    check(true);
    if (existing) append(main, await statsView(existing));
  },
};

async function statsView(toolId) {
  const stats = await api("GET", `/tools/${encodeURIComponent(toolId)}/stats`).catch(() => null);
  if (!stats) return h("p", {}, "No statistics.");
  const ms = (v) => (v === null || v === undefined ? "-" : `${v} ms`);
  return h("section", { "aria-label": "Statistics" }, h("h2", {}, "Calls in the last day"),
    h("dl", { class: "stats" },
      h("dt", {}, "Calls"), h("dd", {}, String(stats.calls)),
      h("dt", {}, "Errors"), h("dd", {}, `${stats.errors} (${Math.round(stats.error_rate * 100)}%)`),
      h("dt", {}, "p50"), h("dd", {}, ms(stats.p50_ms)),
      h("dt", {}, "p95"), h("dd", {}, ms(stats.p95_ms))));
}
