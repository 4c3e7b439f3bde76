// #/mcp-servers: the tenant's MCP servers (/mcp-servers): add one, edit it (PUT replaces all
// but the name; header values are never shown, so left empty they are kept), enable or disable
// it, test its connection (POST /mcp-servers/{name}/test: the tools it lists now, or exactly why
// not) and delete it. The operator's servers are listed and can be tested, not changed. The
// service checks everything again: its 422s are shown field by field.
import { api } from "../api.js";
import { append, asText, button, changeAndReload, clear, confirmButton, count, field, h, json, list, splitList, table, when } from "../dom.js";

const TYPES = ["streamable-http", "sse"];

/** "Name: value" lines as a headers object; an Error naming the line that is not one. */
export function parseHeaders(text) {
  const headers = {};
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const colon = line.indexOf(":");
    if (colon <= 0) throw new Error(`Headers, line ${i + 1}: write it as Name: value`);
    headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
  });
  return headers;
}

/** What PUT takes to change only `enabled` (every field as listed; headers left out: kept). */
function asStored(server, changes = {}) {
  return {
    type: server.type, url: server.url, description: server.description || "",
    context: server.context || {}, include: server.include ?? null, exclude: server.exclude || [],
    enabled: server.enabled !== false, ...changes,
  };
}

function serverForm(ctx, saved) {
  let editing = null; // the server being edited; null: a new one
  const name = h("input", { name: "server_name", required: true, autocomplete: "off", spellcheck: "false" });
  const type = h("select", { name: "type" }, TYPES.map((t) => h("option", { value: t }, t)));
  const url = h("input", { type: "url", name: "url", required: true, class: "wide", placeholder: "https://mcp.example.com/mcp" });
  const description = h("input", { name: "description", class: "wide" });
  const headers = h("textarea", { name: "headers", rows: 3, cols: 80, class: "code", autocomplete: "off", spellcheck: "false", placeholder: "Authorization: Bearer ..." });
  const headersHint = h("small", { class: "hint" }, "");
  const context = h("textarea", { name: "context", rows: 2, cols: 80, class: "code", spellcheck: "false", placeholder: '{"user_id": {"argument": "user"}}' });
  const include = h("input", { name: "include", class: "wide" });
  const exclude = h("input", { name: "exclude", class: "wide" });
  const enabled = h("input", { type: "checkbox", name: "enabled", checked: true });
  const heading = h("h2", {}, "Add an MCP server");
  const save = h("button", { type: "submit" }, "Add server");
  const cancel = button("Cancel editing", () => show(null), { hidden: true });
  const answer = h("div", { "aria-live": "polite" });
  const show = (server) => {
    editing = server;
    name.value = asText(server?.name);
    name.readOnly = server !== null;
    type.value = server?.type || TYPES[0];
    url.value = asText(server?.url);
    description.value = asText(server?.description);
    headers.value = "";
    const names = Object.keys(server?.headers || {});
    headersHint.textContent = server && names.length
      ? `Stored: ${names.join(", ")} (values never shown). Left empty, they are kept; written here, they replace them all.`
      : "One per line, Name: value. Stored encrypted; never shown again.";
    context.value = server && Object.keys(server.context || {}).length ? json(server.context) : "";
    include.value = list(server?.include);
    exclude.value = list(server?.exclude);
    enabled.checked = server ? server.enabled !== false : true;
    heading.textContent = server ? `Edit ${server.name}` : "Add an MCP server";
    save.textContent = server ? "Save server" : "Add server";
    cancel.hidden = server === null;
    clear(answer);
    (server ? url : name).focus();
  };
  const body = () => {
    const request = {
      type: type.value, url: url.value.trim(), description: description.value,
      exclude: splitList(exclude.value), enabled: enabled.checked,
    };
    if (splitList(include.value).length) request.include = splitList(include.value);
    if (context.value.trim()) {
      try {
        request.context = JSON.parse(context.value);
      } catch (error) {
        throw new Error(`Context mappings are not valid JSON: ${error.message}`);
      }
    }
    if (headers.value.trim() || !editing) request.headers = parseHeaders(headers.value);
    return request;
  };
  const submit = async (event) => {
    event.preventDefault();
    let request;
    try {
      request = body();
    } catch (error) {
      ctx.error(error, answer);
      return;
    }
    try {
      const server = editing
        ? await api("PUT", `/mcp-servers/${encodeURIComponent(editing.name)}`, request)
        : await api("POST", "/mcp-servers", { name: name.value.trim(), ...request });
      headers.value = ""; // write-only: gone from the page once the service has it
      const warned = (server.warnings || []).join(" ");
      ctx.status(`${editing ? "Saved" : "Added"} the MCP server ${server.name}.${warned ? ` ${warned}` : ""}`);
      show(null);
      await saved(server.name);
    } catch (error) {
      ctx.error(error, answer);
    }
  };
  const node = h("form", { class: "card", onsubmit: submit }, heading,
    field("Name", name, "Its tools join chats as name__tool; it cannot change once made."),
    field("Transport", type),
    field("URL", url, "It must pass the tenant's outbound policy (a public host, unless the allow list opens it)."),
    field("Description", description),
    h("div", { class: "field" }, h("label", { for: "mcp-headers" }, "Headers"), headers, headersHint),
    field("Context mappings (JSON)", context, "A chat's context argument onto a tool argument or a header: {\"name\": {\"argument\": \"arg\"}} or {\"name\": {\"header\": \"X-Name\"}}."),
    field("Only these tools (comma-separated; default: all)", include),
    field("Never these tools (comma-separated)", exclude),
    h("div", { class: "field" }, h("label", { class: "inline" }, enabled,
      " Enabled (chats, invokes and /mcp use its tools only while it is)")),
    h("p", { class: "actions" }, save, cancel), answer);
  headers.id = "mcp-headers";
  headers.setAttribute("aria-describedby", "mcp-headers-hint");
  headersHint.id = "mcp-headers-hint";
  show(null);
  return { node, show };
}

function testResult(result) {
  if (!result.ok) {
    return h("div", { class: "problem", role: "alert" },
      h("strong", {}, `${result.name}: the connection failed after ${Math.round(result.duration_ms)} ms`),
      h("p", {}, asText(result.error)));
  }
  return h("section", { class: "result ok", "aria-label": `Tools of ${result.name}` },
    h("p", {}, `${result.name} answered in ${Math.round(result.duration_ms)} ms, listing ${count(result.tools.length, "tool")}.`),
    table(`${count(result.tools.length, "tool")} of ${result.name}`, ["Tool id", "Name on the server", "Description"],
      result.tools.map((t) => [asText(t.tool_id), asText(t.name), h("span", { class: "description" }, asText(t.description))])));
}

function actions(server, ctx, form, reload, tested) {
  const mine = server.source === "tenant";
  const test = button("Test", async () => {
    append(clear(tested), h("p", { role: "status" }, `Connecting to ${server.name}…`));
    try {
      const result = await api("POST", `/mcp-servers/${encodeURIComponent(server.name)}/test`);
      append(clear(tested), testResult(result));
      ctx.status(result.ok ? `${server.name}: ${count(result.tools.length, "tool")} listed.` : `${server.name}: the connection failed.`);
    } catch (error) {
      ctx.error(error, tested);
    }
  }, { "aria-label": `Test the connection to ${server.name}` });
  if (!mine) return h("div", { class: "actions" }, test);
  const on = server.enabled !== false;
  return h("div", { class: "actions" },
    button("Edit", () => form.show(server), { "aria-label": `Edit ${server.name}` }),
    test,
    button(on ? "Disable" : "Enable", () => changeAndReload(ctx, reload, async () => {
      await api("PUT", `/mcp-servers/${encodeURIComponent(server.name)}`, asStored(server, { enabled: !on }));
      return `${on ? "Disabled" : "Enabled"} ${server.name}.`;
    }), { "aria-label": `${on ? "Disable" : "Enable"} ${server.name}` }),
    confirmButton("Delete", `Delete ${server.name}?`, () => changeAndReload(ctx, reload, async () => {
      await api("DELETE", `/mcp-servers/${encodeURIComponent(server.name)}`);
      return `Deleted the MCP server ${server.name}.`;
    }), { "aria-label": `Delete ${server.name}` }));
}

export const mcpServersPage = {
  id: "mcp-servers",
  title: "MCP servers",
  hash: "mcp-servers",
  roles: ["tenant"],
  probe: "/mcp-servers",
  async render(main, params, ctx) {
    const listing = h("div", { "aria-live": "polite" });
    const tested = h("div", { "aria-live": "polite", class: "tested" });
    const reload = async () => {
      const servers = await api("GET", "/mcp-servers");
      append(clear(listing), table(count(servers.length, "MCP server"),
        ["Name", "Source", "Transport", "URL", "Enabled", "Headers", "Tools", "Description", "Added", "Actions"],
        servers.map((s) => [asText(s.name), asText(s.source), asText(s.type), asText(s.url) || "(the operator's)",
          s.enabled === false ? "no" : "yes",
          Object.entries(s.headers || {}).map(([k, v]) => `${k}: ${v}`).join(", "),
          [s.include ? `only ${list(s.include)}` : "all", s.exclude?.length ? `, not ${list(s.exclude)}` : ""].join(""),
          h("span", { class: "description" }, asText(s.description)), when(s.created_at),
          actions(s, ctx, form, reload, tested)])));
    };
    const form = serverForm(ctx, reload);
    append(main, h("h1", {}, "MCP servers"),
      h("p", {}, "A chat offers the tools of the tenant's enabled servers as server__tool, beside its stored tools ",
        h("a", { href: "#/tools" }, "(the Tools page lists both)"), "."),
      listing, tested, form.node);
    await reload();
  },
};
