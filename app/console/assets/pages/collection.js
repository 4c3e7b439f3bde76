// A read-only page for a tenant collection the console has no page of its own for yet (MCP
// servers): listed only when the service has the route (`probe`), each item's plain fields as
// text. A dedicated page replaces it through `registerPage`.
import { api } from "../api.js";
import { append, asText, h, table } from "../dom.js";

export function collectionPage({ id, title, path }) {
  return {
    id,
    title,
    hash: id,
    roles: ["tenant"],
    probe: path,
    async render(main) {
      const answer = await api("GET", path);
      const items = Array.isArray(answer) ? answer : answer?.items || [];
      const columns = [...new Set(items.flatMap((item) => Object.keys(item || {})))].slice(0, 8);
      append(main, h("h1", {}, title),
        table(`${items.length} ${title.toLowerCase()}`, columns,
          items.map((item) => columns.map((c) => asText(item?.[c])))));
    },
  };
}
