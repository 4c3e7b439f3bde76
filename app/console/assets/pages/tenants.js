// #/tenants and #/tenants/<id> (admin key): tenants, their keys and outbound allow lists.
import { api } from "../api.js";
import { append, asText, button, changeAndReload, clear, confirmButton, count, field, h, table, when } from "../dom.js";

function keyCard(tenantId, apiKey, ctx) {
  const shown = h("input", { readonly: true, value: apiKey, class: "code wide" });
  return h("div", { class: "card ok" },
    field(`The key of ${tenantId}: shown only now, store it`, shown),
    button(`Sign in as ${tenantId}`, () => ctx.signIn(apiKey, `tenant ${tenantId}`).catch((e) => ctx.error(e))));
}

async function allowList(main, tenantId, ctx) {
  const path = `/tenants/${encodeURIComponent(tenantId)}/outbound`;
  const current = await api("GET", path);
  const entries = h("textarea", { name: "allow", rows: 8, cols: 60, class: "code" });
  entries.value = (current.allow || []).join("\n");
  const force = h("input", { type: "checkbox", name: "force" });
  const answer = h("div", { "aria-live": "polite" });
  const submit = async (event) => {
    event.preventDefault();
    const allow = entries.value.split("\n").map((line) => line.trim()).filter(Boolean);
    try {
      const saved = await api("PUT", path, { allow, force: force.checked });
      entries.value = (saved.allow || []).join("\n");
      append(clear(answer), h("p", { class: "ok" }, `Saved ${saved.allow.length} entries.`));
      ctx.status(`Saved the allow list of ${tenantId}.`);
    } catch (error) {
      ctx.error(error, answer);
    }
  };
  append(main, h("h1", {}, `Outbound allow list of ${tenantId}`),
    h("p", {}, h("a", { href: "#/tenants" }, "All tenants")),
    h("form", { class: "card", onsubmit: submit },
      field("Entries, one per line", entries, "A host, an address or a network, each optionally with :port."),
      h("div", { class: "field" }, h("label", { class: "inline" }, force,
        " Accept entries that open every address, loopback or link-local (force)")),
      h("button", { type: "submit" }, "Save allow list")),
    answer);
}

export const tenantsPage = {
  id: "tenants",
  title: "Tenants",
  hash: "tenants",
  roles: ["admin"],
  async render(main, params, ctx) {
    if (params[0]) {
      await allowList(main, params[0], ctx);
      return;
    }
    const listing = h("div", { "aria-live": "polite" });
    const created = h("div", { "aria-live": "polite" });
    const reload = async () => {
      const page = await api("GET", "/tenants?limit=500");
      append(clear(listing), table(count(page.total, "tenant"), ["Tenant", "Created", "Key rotated", ""],
        page.items.map((t) => [asText(t.tenant_id), when(t.created_at), when(t.key_rotated_at),
          h("div", { class: "actions" },
            h("a", { href: `#/tenants/${encodeURIComponent(t.tenant_id)}` }, "Allow list"),
            confirmButton("Rotate key", `Rotate the key of ${t.tenant_id}?`, async () => {
              try {
                const rotated = await api("POST", `/tenants/${encodeURIComponent(t.tenant_id)}/keys`);
                append(clear(created), keyCard(t.tenant_id, rotated.api_key, ctx));
                await reload();
              } catch (error) {
                ctx.error(error, created);
              }
            }, { "aria-label": `Rotate the key of ${t.tenant_id}` }),
            confirmButton("Delete", `Delete ${t.tenant_id} and all its data?`, () => changeAndReload(ctx, reload, async () => {
              await api("DELETE", `/tenants/${encodeURIComponent(t.tenant_id)}`);
              return `Deleted ${t.tenant_id}.`;
            }), { "aria-label": `Delete ${t.tenant_id}` }))])));
    };
    const tenantId = h("input", { name: "tenant_id", required: true });
    const submit = async (event) => {
      event.preventDefault();
      try {
        const made = await api("POST", "/tenants", { tenant_id: tenantId.value.trim() });
        append(clear(created), keyCard(made.tenant_id, made.api_key, ctx));
        ctx.status(`Created ${made.tenant_id}.`);
        await reload();
      } catch (error) {
        ctx.error(error, created);
      }
    };
    append(main, h("h1", {}, "Tenants"),
      h("form", { class: "card", onsubmit: submit }, h("h2", {}, "New tenant"),
        field("Tenant id", tenantId), h("button", { type: "submit" }, "Create tenant")),
      created, listing);
    await reload();
  },
};
