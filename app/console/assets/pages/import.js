// #/import: an OpenAPI document by URL, file or paste; a dry run shows the tools it would make,
// the operations it skips (with the reason) and its problems before anything is stored.
import { api } from "../api.js";
import { append, asText, clear, count, field, h, splitList, table } from "../dom.js";

function sourceChooser() {
  const choice = { kind: "paste" };
  const url = h("input", { type: "url", name: "url", placeholder: "https://api.example.com/openapi.json" });
  const file = h("input", { type: "file", name: "file", accept: ".json,.yaml,.yml,application/json" });
  const paste = h("textarea", { name: "document_text", rows: 14, cols: 90, spellcheck: "false", class: "code" });
  const panes = {
    url: field("Document URL (the service fetches it)", url),
    file: field("Document file (JSON or YAML)", file),
    paste: field("Document (JSON or YAML)", paste),
  };
  const radios = Object.keys(panes).map((kind) => {
    const input = h("input", { type: "radio", name: "source", value: kind, checked: kind === choice.kind,
      onchange: () => { choice.kind = kind; show(); } });
    return h("label", { class: "inline" }, input, { url: " By URL", file: " From a file", paste: " Pasted" }[kind]);
  });
  const show = () => Object.entries(panes).forEach(([kind, pane]) => { pane.hidden = kind !== choice.kind; });
  show();
  choice.node = h("fieldset", {}, h("legend", {}, "Where the document comes from"), ...radios, ...Object.values(panes));
  choice.read = async () => {
    if (choice.kind === "url") return { url: url.value.trim() };
    if (choice.kind === "file") {
      if (!file.files.length) throw new Error("Choose a file first.");
      return { document_text: await file.files[0].text() };
    }
    return { document_text: paste.value };
  };
  return choice;
}

function preview(result) {
  const tools = result.tools || [];
  const skipped = result.skipped || [];
  const problems = result.problems || [];
  return h("section", { "aria-label": "Preview" },
    h("h2", {}, result.dry_run ? "Preview (nothing stored yet)" : "Imported"),
    table(count(tools.length, "tool"), ["Tool id", "Method", "URL", "Description"],
      tools.map((t) => [asText(t.tool_id), asText(t.function?.method), asText(t.function?.url),
        h("span", { class: "description" }, asText(t.function?.description))])),
    table(`${count(skipped.length, "operation")} skipped`, ["Operation", "Reason"],
      skipped.map((s) => [asText(s.operation ?? s.operation_id ?? `${s.method ?? ""} ${s.path ?? ""}`),
        asText(s.reason ?? s)])),
    table(count(problems.length, "problem"), ["Where", "Problem"],
      problems.map((p) => (typeof p === "string" ? ["", p] : [asText(p.path ?? p.operation), asText(p.message ?? p)]))));
}

export const importPage = {
  id: "import",
  title: "Import",
  hash: "import",
  roles: ["tenant"],
  async render(main, params, ctx) {
    const source = sourceChooser();
    const prefix = h("input", { name: "prefix", placeholder: "shop_" });
    const serverUrl = h("input", { type: "url", name: "server_url" });
    const tags = h("input", { name: "tags", placeholder: "shop, orders" });
    const operations = h("input", { name: "operation_ids" });
    const result = h("div", { "aria-live": "polite" });
    const doImport = h("button", { type: "button", disabled: true }, "Import these tools");
    let checked = null;
    const body = async () => {
      const request = { ...(await source.read()), prefix: prefix.value.trim() };
      if (serverUrl.value.trim()) request.server_url = serverUrl.value.trim();
      if (splitList(tags.value).length) request.tags = splitList(tags.value);
      if (splitList(operations.value).length) request.operation_ids = splitList(operations.value);
      return request;
    };
    const run = async (dryRun) => {
      try {
        const request = dryRun ? await body() : checked;
        const answer = await api("POST", "/tools/import", { ...request, dry_run: dryRun });
        append(clear(result), preview(answer));
        checked = dryRun && !(answer.problems || []).length && (answer.tools || []).length ? request : null;
        doImport.disabled = checked === null;
        if (dryRun) doImport.textContent = `Import ${count((answer.tools || []).length, "tool")}`;
        ctx.status(dryRun ? "Preview ready: nothing is stored until you import." : `Imported ${count((answer.tools || []).length, "tool")}.`);
      } catch (error) {
        checked = null;
        doImport.disabled = true;
        ctx.error(error, result);
      }
    };
    doImport.addEventListener("click", () => run(false));
    append(main, h("h1", {}, "Import an OpenAPI document"),
      h("form", { class: "card", onsubmit: (event) => { event.preventDefault(); run(true); } },
        source.node,
        h("fieldset", {}, h("legend", {}, "Options"),
          field("Prefix for tool ids and names", prefix),
          field("Server URL (default: the document's first)", serverUrl),
          field("Tags to add (comma-separated)", tags),
          field("Only these operation ids (comma-separated)", operations)),
        h("p", {}, h("button", { type: "submit" }, "Preview (dry run)"), " ", doImport)),
      result);
  },
};
