// #/secrets: names only. A value is written and never read back (the API has no way to).
import { api } from "../api.js";
import { append, asText, changeAndReload, clear, confirmButton, count, field, h, table, when } from "../dom.js";

export const secretsPage = {
  id: "secrets",
  title: "Secrets",
  hash: "secrets",
  roles: ["tenant"],
  async render(main, params, ctx) {
    const listing = h("div", { "aria-live": "polite" });
    const answer = h("div", { "aria-live": "polite" });
    const reload = async () => {
      const secrets = await api("GET", "/secrets");
      append(clear(listing), table(count(secrets.length, "secret"), ["Name", "Created", "Updated", ""],
        secrets.map((s) => [asText(s.name), when(s.created_at), when(s.updated_at),
          confirmButton("Delete", `Delete ${s.name}?`, () => changeAndReload(ctx, reload, async () => {
            await api("DELETE", `/secrets/${encodeURIComponent(s.name)}`);
            return `Deleted the secret ${s.name}.`;
          }), { "aria-label": `Delete secret ${s.name}` })])));
    };
    const name = h("input", { name: "secret_name", required: true, autocomplete: "off" });
    const value = h("input", { type: "password", name: "secret_value", required: true, autocomplete: "new-password" });
    const submit = async (event) => {
      event.preventDefault();
      try {
        const saved = await api("PUT", `/secrets/${encodeURIComponent(name.value.trim())}`, { value: value.value });
        value.value = ""; // write-only: the page forgets it as soon as the service has it
        append(clear(answer), h("p", { class: "ok" }, `Saved ${saved.name}; its value cannot be read back.`));
        ctx.status(`Saved the secret ${saved.name}.`);
        await reload();
      } catch (error) {
        ctx.error(error, answer);
      }
    };
    append(main, h("h1", {}, "Secrets"),
      h("form", { class: "card", onsubmit: submit }, h("h2", {}, "Set a secret"),
        field("Name", name, "Tools use it as {secret:NAME} in a header, or as a context parameter's secret."),
        field("Value (write-only)", value, "Encrypted at rest and never returned, here or by the API."),
        h("button", { type: "submit" }, "Save secret")),
      answer, listing);
    await reload();
  },
};
