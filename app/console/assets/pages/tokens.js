// #/tokens: client tokens (what a frontend gives one user's agent instead of the tenant key).
// A new token is shown once, as the service answers it; the list never holds one.
import { api } from "../api.js";
import { append, asText, changeAndReload, clear, confirmButton, count, field, h, list, splitList, table, when } from "../dom.js";

export const tokensPage = {
  id: "tokens",
  title: "Client tokens",
  hash: "tokens",
  roles: ["tenant"],
  async render(main, params, ctx) {
    const listing = h("div", { "aria-live": "polite" });
    const created = h("div", { "aria-live": "polite" });
    const reload = async () => {
      const tokens = await api("GET", "/client-tokens");
      append(clear(listing), table(count(tokens.length, "client token"),
        ["Name", "Token id", "Tools", "Tags", "Bound context", "Created", "Expires", ""],
        tokens.map((t) => [asText(t.name), asText(t.token_id), list(t.tool_ids) || "all",
          list(t.tags), list(t.context_names), when(t.created_at), when(t.expires_at) || "never",
          confirmButton("Revoke", `Revoke ${t.name}?`, () => changeAndReload(ctx, reload, async () => {
            await api("DELETE", `/client-tokens/${encodeURIComponent(t.token_id)}`);
            return `Revoked ${t.name}.`;
          }), { "aria-label": `Revoke ${t.name}` })])));
    };
    const name = h("input", { name: "name", required: true });
    const tools = h("input", { name: "tool_ids", placeholder: "rolldice" });
    const tags = h("input", { name: "tags" });
    const context = h("textarea", { name: "context_arguments", rows: 2, class: "code", placeholder: '{"user_id": "u-42"}' });
    const expires = h("input", { type: "number", name: "expires_in_s", min: "60", step: "1" });
    const submit = async (event) => {
      event.preventDefault();
      try {
        const body = { name: name.value.trim() };
        if (splitList(tools.value).length) body.tool_ids = splitList(tools.value);
        if (splitList(tags.value).length) body.tags = splitList(tags.value);
        if (context.value.trim()) body.context_arguments = JSON.parse(context.value);
        if (expires.value) body.expires_in_s = Number(expires.value);
        const token = await api("POST", "/client-tokens", body);
        const shown = h("input", { readonly: true, value: token.token, class: "code wide" });
        append(clear(created), h("div", { class: "card ok" },
          field(`The token for ${token.name}: shown only now, store it`, shown)));
        shown.select();
        ctx.status(`Created a client token for ${token.name}.`);
        await reload();
      } catch (error) {
        ctx.error(error, created);
      }
    };
    append(main, h("h1", {}, "Client tokens"),
      h("form", { class: "card", onsubmit: submit }, h("h2", {}, "New client token"),
        field("Name", name), field("Only these tool ids (comma-separated)", tools),
        field("Only tools with these tags (comma-separated)", tags),
        field("Bound context arguments (JSON object)", context, "They win over anything a request sends."),
        field("Lifetime in seconds (empty: until revoked)", expires),
        h("button", { type: "submit" }, "Create token")),
      created, listing);
    await reload();
  },
};
