// #/providers: the tenant's own model providers (/model-providers). PUT creates or replaces one
// whole; its key is one of the tenant's secrets, named here and never shown (the API never
// returns it: set the value on the Secrets page).
import { api } from "../api.js";
import { append, asText, button, changeAndReload, clear, confirmButton, count, field, h, list, splitList, table, when } from "../dom.js";

const APIS = ["chat_completions", "responses", "anthropic_messages"];
const DEFAULTS = { api: "chat_completions", timeout_s: 60, max_retries: 2, max_tokens: 4096 };

function providerForm(ctx, saved) {
  let editing = null;
  const name = h("input", { name: "provider_name", required: true, autocomplete: "off" });
  const apiKind = h("select", { name: "api" }, APIS.map((a) => h("option", { value: a }, a)));
  const baseUrl = h("input", { type: "url", name: "base_url", required: true, class: "wide", placeholder: "https://api.openai.com/v1" });
  const secret = h("select", { name: "api_key_secret", required: true });
  const model = h("input", { name: "default_model", required: true, placeholder: "gpt-4o-mini" });
  const allowed = h("input", { name: "allowed_models", class: "wide" });
  const isDefault = h("input", { type: "checkbox", name: "default" });
  const timeout = h("input", { type: "number", name: "timeout_s", min: "0.1", max: "600", step: "any" });
  const retries = h("input", { type: "number", name: "max_retries", min: "0", max: "2", step: "1" });
  const maxTokens = h("input", { type: "number", name: "max_tokens", min: "1", step: "1" });
  const previous = h("input", { type: "checkbox", name: "previous_response_id" });
  const heading = h("h2", {}, "New model provider");
  const save = h("button", { type: "submit" }, "Create provider");
  const cancel = button("Cancel editing", () => show(null), { hidden: true });
  const answer = h("div", { "aria-live": "polite" });

  /** The secret choices: the tenant's secret names (and the one the provider names, if gone). */
  const secrets = async (current) => {
    const names = (await api("GET", "/secrets")).map((s) => s.name);
    if (current && !names.includes(current)) names.push(current);
    append(clear(secret), h("option", { value: "" }, names.length ? "(choose a secret)" : "(no secrets yet)"),
      names.map((n) => h("option", { value: n }, n)));
    secret.value = current || "";
  };
  const show = (provider) => {
    const p = { ...DEFAULTS, ...(provider || {}) };
    editing = provider?.name ?? null;
    name.value = editing ?? "";
    name.readOnly = editing !== null;
    apiKind.value = p.api;
    baseUrl.value = asText(p.base_url);
    model.value = asText(p.default_model);
    allowed.value = (p.allowed_models || []).filter((m) => m !== p.default_model).join(", ");
    isDefault.checked = Boolean(p.default);
    timeout.value = String(p.timeout_s);
    retries.value = String(p.max_retries);
    maxTokens.value = String(p.max_tokens);
    previous.checked = Boolean(p.previous_response_id);
    heading.textContent = editing === null ? "New model provider" : `Edit ${editing}`;
    save.textContent = editing === null ? "Create provider" : "Save provider";
    cancel.hidden = editing === null;
    clear(answer);
    (editing === null ? name : baseUrl).focus();
    return secrets(provider?.api_key_secret).catch((error) => ctx.error(error, answer));
  };
  const submit = async (event) => {
    event.preventDefault();
    const target = editing ?? name.value.trim();
    const body = {
      api: apiKind.value, base_url: baseUrl.value.trim(), api_key_secret: secret.value,
      default_model: model.value.trim(), default: isDefault.checked,
      timeout_s: Number(timeout.value), max_retries: Number(retries.value),
      max_tokens: Number(maxTokens.value), previous_response_id: previous.checked,
    };
    if (splitList(allowed.value).length) body.allowed_models = splitList(allowed.value);
    try {
      const provider = await api("PUT", `/model-providers/${encodeURIComponent(target)}`, body);
      ctx.status(`Saved the model provider ${provider.name}.`);
      await show(null);
      await saved();
    } catch (error) {
      ctx.error(error, answer);
    }
  };
  const node = h("form", { class: "card", onsubmit: submit }, heading,
    field("Name", name, "What a chat names as its provider; it cannot change once made."),
    field("API", apiKind),
    field("Base URL", baseUrl, "It must pass the tenant's outbound policy (a public host, unless the allow list opens it)."),
    field("API key secret", secret, "One of the tenant's secrets (set its value on the Secrets page); the key is never shown here."),
    field("Default model", model),
    field("Other models chats may name (comma-separated)", allowed),
    h("div", { class: "field" }, h("label", { class: "inline" }, isDefault,
      " The tenant's default provider (for chats that name none)")),
    h("div", { class: "filters" }, field("Timeout per model call (s)", timeout),
      field("Retries (0-2)", retries), field("Max output tokens (Anthropic)", maxTokens)),
    h("div", { class: "field" }, h("label", { class: "inline" }, previous,
      " Responses API: send previous_response_id (the endpoint stores responses)")),
    h("p", { class: "actions" }, save, cancel), answer);
  return { node, show };
}

export const providersPage = {
  id: "providers",
  title: "Model providers",
  hash: "providers",
  roles: ["tenant"],
  probe: "/model-providers",
  async render(main, params, ctx) {
    const listing = h("div", { "aria-live": "polite" });
    const reload = async () => {
      const providers = await api("GET", "/model-providers");
      append(clear(listing), table(count(providers.length, "model provider"),
        ["Name", "API", "Base URL", "Key secret", "Default model", "Allowed models", "Default", "Updated", "Actions"],
        providers.map((p) => [asText(p.name), asText(p.api), asText(p.base_url), asText(p.api_key_secret),
          asText(p.default_model), list(p.allowed_models), p.default ? "yes" : "no", when(p.updated_at),
          h("div", { class: "actions" },
            button("Edit", () => form.show(p), { "aria-label": `Edit provider ${p.name}` }),
            confirmButton("Delete", `Delete ${p.name}?`, () => changeAndReload(ctx, reload, async () => {
              await api("DELETE", `/model-providers/${encodeURIComponent(p.name)}`);
              return `Deleted the model provider ${p.name}.`;
            }), { "aria-label": `Delete provider ${p.name}` }))])));
    };
    const form = providerForm(ctx, reload);
    append(main, h("h1", {}, "Model providers"),
      h("p", {}, "A chat names a provider (or goes to the tenant's default one, else to the "
        + "operator's model endpoint)."),
      form.node, listing);
    await form.show(null);
    await reload();
  },
};
