// #/categories: the tenant's tool categories (/categories). Create, edit (PUT replaces the
// description, usage hints and `enabled`), delete: a category goes with its tools, so the
// second press names how many, and the service lists the ones it deleted.
import { api } from "../api.js";
import { append, asText, button, changeAndReload, clear, confirmButton, count, field, h, table, when } from "../dom.js";

const DEFAULT = "default"; // always there, always enabled, never deleted

function deleteButton(category, ctx, reload) {
  const tools = category.tools || 0;
  const question = tools
    ? `Delete ${category.name} and its ${count(tools, "tool")}?`
    : `Delete ${category.name}?`;
  return confirmButton("Delete", question, () => changeAndReload(ctx, reload, async () => {
    const query = tools ? "?confirm=true" : ""; // without it, a category holding tools is a 409
    const gone = await api("DELETE", `/categories/${encodeURIComponent(category.name)}${query}`);
    const deleted = gone.deleted_tools || [];
    return `Deleted ${gone.name}${deleted.length ? ` and ${count(deleted.length, "tool")}: ${deleted.join(", ")}` : ""}.`;
  }), { "aria-label": `Delete category ${category.name}` });
}

function categoryForm(ctx, saved) {
  let editing = null; // the name of the category being edited; null: a new one
  const name = h("input", { name: "category_name", required: true, autocomplete: "off" });
  const description = h("input", { name: "description", class: "wide" });
  const enabled = h("input", { type: "checkbox", name: "enabled", checked: true });
  const hints = h("textarea", { name: "usage_hints", rows: 3, cols: 80 });
  const heading = h("h2", {}, "New category");
  const save = h("button", { type: "submit" }, "Create category");
  const cancel = button("Cancel editing", () => show(null), { hidden: true });
  const answer = h("div", { "aria-live": "polite" });
  const show = (category) => {
    editing = category?.name ?? null;
    name.value = editing ?? "";
    name.readOnly = editing !== null;
    description.value = asText(category?.description);
    enabled.checked = category ? Boolean(category.enabled) : true;
    hints.value = asText(category?.usage_hints);
    heading.textContent = editing === null ? "New category" : `Edit ${editing}`;
    save.textContent = editing === null ? "Create category" : "Save category";
    cancel.hidden = editing === null;
    clear(answer);
    (editing === null ? name : description).focus();
  };
  const submit = async (event) => {
    event.preventDefault();
    const body = { description: description.value, enabled: enabled.checked, usage_hints: hints.value };
    try {
      const category = editing === null
        ? await api("POST", "/categories", { name: name.value.trim(), ...body })
        : await api("PUT", `/categories/${encodeURIComponent(editing)}`, body);
      ctx.status(`Saved the category ${category.name}.`);
      show(null);
      await saved();
    } catch (error) {
      ctx.error(error, answer);
    }
  };
  const node = h("form", { class: "card", onsubmit: submit }, heading,
    field("Name", name, "Letters, digits, _ or -; it cannot change once made."),
    field("Description", description),
    h("div", { class: "field" }, h("label", { class: "inline" }, enabled,
      " Enabled (chats offer its tools only while it is)")),
    field("Usage hints", hints, "Told to the model, as a \"## name tools\" section, when a chat offers the category's tools."),
    h("p", { class: "actions" }, save, cancel), answer);
  return { node, show };
}

export const categoriesPage = {
  id: "categories",
  title: "Categories",
  hash: "categories",
  roles: ["tenant"],
  probe: "/categories",
  async render(main, params, ctx) {
    const listing = h("div", { "aria-live": "polite" });
    const reload = async () => {
      const categories = await api("GET", "/categories");
      append(clear(listing), table(count(categories.length, "category", "categories"),
        ["Name", "Description", "Enabled", "Usage hints", "Tools", "Updated", "Actions"],
        categories.map((c) => [asText(c.name), h("span", { class: "description" }, asText(c.description)),
          c.enabled ? "yes" : "no", h("span", { class: "description" }, asText(c.usage_hints)),
          String(c.tools ?? 0), when(c.updated_at),
          h("div", { class: "actions" },
            button("Edit", () => form.show(c), { "aria-label": `Edit category ${c.name}` }),
            c.name === DEFAULT ? null : deleteButton(c, ctx, reload))])));
    };
    const form = categoryForm(ctx, reload);
    append(main, h("h1", {}, "Categories"),
      h("p", {}, "A chat offers the enabled tools of enabled categories (and of default, always). "
        + "A tool's editor sets its category."),
      form.node, listing);
    await reload();
  },
};
