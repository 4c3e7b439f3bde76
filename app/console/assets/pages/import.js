// #/import: an OpenAPI document by URL, file or paste; a dry run shows the tools it would make,
// the operations it skips (with the reason) and its problems before anything is stored, then
// the import what it stored. While either is out (a large document takes many seconds) the
// form is busy: it says so, with the time spent, and takes no second press.
import { api } from "../api.js";
import { append, asText, busyWhile, clear, count, field, h, splitList, table } from "../dom.js";

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

/** How many operations of each outcome: converted (a tool), skipped (with its reason), refused by
 * the tool rules (a problem) and, once imported, stored. */
function verdicts(result) {
  const tools = result.tools || [];
  const skipped = result.skipped || [];
  const problems = result.problems || [];
  const summary = result.summary || {};
  const stored = result.dry_run ? null : (summary.stored ?? tools.length);
  const reasons = new Map();
  for (const s of skipped) {
    const reason = asText(s.reason ?? s);
    reasons.set(reason, (reasons.get(reason) || 0) + 1);
  }
  return { tools, skipped, problems, stored, reasons: [...reasons].sort((a, b) => b[1] - a[1]) };
}

function preview(result) {
  const { tools, skipped, problems, stored, reasons } = verdicts(result);
  // The answer's summary counts (POST /tools/import: a verdict per operation).
  const summary = result.summary || {};
  const counts = [
    ["Operations read", summary.operations ?? tools.length + skipped.length],
    ["Converted to tools", summary.converted ?? tools.length],
    ["Skipped", skipped.length],
    ["Refused by the tool rules", problems.length],
  ];
  if (stored !== null) counts.push(["Stored", stored]);
  return h("section", { "aria-label": result.dry_run ? "Preview" : "Imported" },
    h("h2", {}, result.dry_run ? "Preview (nothing stored yet)" : `Imported: ${count(stored, "tool")} stored`),
    h("dl", { class: "stats counts", "aria-label": "Operations" },
      counts.map(([label, n]) => [h("dt", {}, label), h("dd", {}, String(n))])),
    reasons.length ? table("Skipped, by reason", ["Reason", "Operations"], reasons.map(([r, n]) => [r, String(n)])) : null,
    table(count(tools.length, "tool"), ["Tool id", "Method", "URL", "Description"],
      tools.map((t) => [result.dry_run ? asText(t.tool_id) : h("a", { href: `#/edit/${encodeURIComponent(t.tool_id)}` }, asText(t.tool_id)),
        asText(t.function?.method), asText(t.function?.url),
        h("span", { class: "description" }, asText(t.function?.description))])),
    table(`${count(skipped.length, "operation")} skipped`, ["Operation", "Reason"],
      skipped.map((s) => [asText(s.operation ?? s.operation_id ?? `${s.method ?? ""} ${s.path ?? ""}`),
        asText(s.reason ?? s)])),
    table(count(problems.length, "problem"), ["Where", "Problem"],
      problems.map((p) => (typeof p === "string" ? ["", p] : [asText(p.path ?? p.operation), asText(p.message ?? p)]))));
}

/** While a request is out: what it is doing and for how long (a large document takes a while). */
function working(what) {
  const started = Date.now();
  const line = h("p", { class: "working", role: "status" }, h("progress", { "aria-label": what }), ` ${what}`);
  const seconds = h("span", {}, "");
  append(line, seconds);
  const timer = setInterval(() => { seconds.textContent = ` (${Math.round((Date.now() - started) / 1000)} s)`; }, 1000);
  return { node: line, stop: () => clearInterval(timer) };
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
      let request;
      try {
        request = dryRun ? await body() : checked;
      } catch (error) {
        ctx.error(error, result);
        return;
      }
      const progress = working(dryRun ? "Reading and converting the document…" : `Storing ${doImport.textContent.replace(/^Import /, "")}…`);
      append(clear(result), progress.node);
      try {
        const answer = await api("POST", "/tools/import", { ...request, dry_run: dryRun });
        append(clear(result), preview(answer));
        checked = dryRun && !(answer.problems || []).length && (answer.tools || []).length ? request : null;
        doImport.disabled = checked === null;
        if (dryRun) doImport.textContent = `Import ${count((answer.tools || []).length, "tool")}`;
        const { stored, skipped } = verdicts(answer);
        ctx.status(dryRun
          ? `Preview ready: ${count((answer.tools || []).length, "tool")}, ${skipped.length} skipped; nothing is stored until you import.`
          : `Imported ${count(stored, "tool")}.`);
      } catch (error) {
        checked = null;
        doImport.disabled = true;
        clear(result);
        ctx.error(error, result);
      } finally {
        progress.stop();
      }
    };
    const form = h("form", { class: "card", onsubmit: (event) => { event.preventDefault(); return run(true); } },
      source.node,
      h("fieldset", {}, h("legend", {}, "Options"),
        field("Prefix for tool ids and names", prefix),
        field("Server URL (default: the document's first)", serverUrl),
        field("Tags to add (comma-separated)", tags),
        field("Only these operation ids (comma-separated)", operations)),
      h("p", {}, h("button", { type: "submit" }, "Preview (dry run)"), " ", doImport));
    // Either request makes the whole form busy: no second preview or import while one is out.
    doImport.addEventListener("click", busyWhile(form, () => run(false)));
    append(main, h("h1", {}, "Import an OpenAPI document"), form, result);
  },
};
