// #/tools: the tenant's tools, filtered by type and tag (on the service) and by text (here);
// below them the tools of its enabled MCP servers, as chats are offered them.
import { ApiError, api } from "../api.js";
import { append, asText, button, changeAndReload, clear, confirmButton, count, field, h, list, table } from "../dom.js";

const PAGE_SIZE = 100;

function filters(state, reload, redraw) {
  const type = h("select", { name: "type", onchange: () => { state.type = type.value; state.offset = 0; reload(); } },
    h("option", { value: "" }, "any"), h("option", { value: "function" }, "function"),
    h("option", { value: "external" }, "external"));
  type.value = state.type;
  const tag = h("input", { name: "tag", value: state.tag, placeholder: "weather",
    onchange: () => { state.tag = tag.value.trim(); state.offset = 0; reload(); } });
  const text = h("input", { type: "search", name: "filter", value: state.text,
    oninput: () => { state.text = text.value.toLowerCase(); redraw(); } });
  return h("div", { class: "filters" }, field("Type", type), field("Tag", tag),
    field("Filter by id, name or description", text));
}

function matches(tool, text) {
  if (!text) return true;
  const fn = tool.function || {};
  return [tool.tool_id, fn.name, fn.description, tool.title].some(
    (value) => typeof value === "string" && value.toLowerCase().includes(text));
}

function row(tool, ctx, reload) {
  const fn = tool.function || {};
  const id = tool.tool_id;
  const actions = h("div", { class: "actions" },
    h("a", { href: `#/invoke/${encodeURIComponent(id)}` }, "Invoke"),
    confirmButton("Delete", `Delete ${id}?`, () => changeAndReload(ctx, reload, async () => {
      await api("DELETE", `/tools/${encodeURIComponent(id)}`);
      return `Deleted ${id}.`;
    }), { "aria-label": `Delete ${id}` }));
  if (tool.problems) {
    return [id, "", tool.type || "", "", "", `Unreadable: ${list(tool.problems)}`, actions];
  }
  return [
    h("a", { href: `#/edit/${encodeURIComponent(id)}` }, id),
    asText(fn.name), tool.type, tool.enabled ? "yes" : "no", list(tool.tags),
    h("span", { class: "description" }, asText(fn.description)), actions,
  ];
}

/** The tools of each enabled MCP server (GET /mcp-servers/{name}/tools), or why a server could
 * not list them. At most MAX_MCP_SERVERS_PER_TENANT servers, asked at once. */
async function mcpTools() {
  let servers;
  try {
    servers = await api("GET", "/mcp-servers");
  } catch (error) {
    if (error instanceof ApiError && [404, 405].includes(error.status)) return []; // an older service
    throw error;
  }
  return Promise.all(servers.filter((s) => s.enabled !== false).map(async (server) => {
    try {
      return { server, tools: await api("GET", `/mcp-servers/${encodeURIComponent(server.name)}/tools`) };
    } catch (error) {
      return { server, tools: [], error: error instanceof ApiError ? error.lines()[0] : String(error) };
    }
  }));
}

function mcpSection(listed, text) {
  const rows = [];
  for (const { server, tools, error } of listed) {
    if (error) rows.push([asText(server.name), "", "", `Not listed: ${error}`]);
    for (const tool of tools) {
      if (!matches(tool, text)) continue;
      rows.push([asText(tool.tool_id), asText(server.name), asText(tool.mcp_tool),
        h("span", { class: "description" }, asText(tool.function?.description))]);
    }
  }
  if (!listed.length) return null;
  return h("section", { "aria-label": "MCP tools" },
    h("h2", {}, "Tools of MCP servers"),
    table(`${count(rows.length, "MCP tool")} shown`, ["Tool id", "Server", "Name on the server", "Description"], rows),
    h("p", {}, h("a", { href: "#/mcp-servers" }, "Manage MCP servers")));
}

export const toolsPage = {
  id: "tools",
  title: "Tools",
  hash: "tools",
  roles: ["tenant"],
  async render(main, params, ctx) {
    const state = { type: "", tag: "", text: "", offset: 0, page: null, mcp: [] };
    const body = h("div", { "aria-live": "polite" });
    const mcpBody = h("div", { "aria-live": "polite" });
    const redraw = () => {
      append(clear(mcpBody), state.type || state.tag ? null : mcpSection(state.mcp, state.text));
      if (!state.page) return;
      const { items, total, offset } = state.page;
      const shown = items.filter((tool) => matches(tool, state.text));
      const pager = h("div", { class: "pager" },
        `${offset + 1}-${offset + items.length} of ${total}`,
        offset > 0 ? button("Previous", () => { state.offset -= PAGE_SIZE; return reload(); }) : null,
        offset + items.length < total ? button("Next", () => { state.offset += PAGE_SIZE; return reload(); }) : null);
      append(clear(body),
        table(`${count(shown.length, "tool")} shown`,
          ["Tool id", "Function", "Type", "Enabled", "Tags", "Description", "Actions"],
          shown.map((tool) => row(tool, ctx, reload))),
        total ? pager : h("p", {}, "No tools match."));
    };
    const reload = async () => {
      const query = new URLSearchParams({ limit: PAGE_SIZE, offset: state.offset });
      if (state.type) query.set("type", state.type);
      if (state.tag) query.set("tag", state.tag);
      try {
        state.page = await api("GET", `/tools/?${query}`);
        redraw();
      } catch (error) {
        ctx.error(error, body);
      }
    };
    append(main, h("h1", {}, "Tools"),
      h("p", { class: "actions" }, h("a", { href: "#/edit" }, "New tool"),
        h("a", { href: "#/import" }, "Import an OpenAPI document")),
      filters(state, reload, redraw), body, mcpBody);
    await reload();
    try {
      state.mcp = await mcpTools();
      redraw();
    } catch (error) {
      ctx.error(error, mcpBody);
    }
  },
};
