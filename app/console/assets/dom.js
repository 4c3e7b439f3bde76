// Building the page. Every value that came from the service (names, descriptions, outputs,
// errors) becomes a text node: nothing here ever parses a string as markup.

let nextId = 0;

/** An element: `props` are attributes (strings, booleans) or `on<event>` listeners. A form's
 * `onsubmit` and a button's `onclick` that return a promise (a request) make it busy until the
 * promise settles (`busyWhile`). */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      const type = name.slice(2);
      const acts = (tag === "form" && type === "submit") || (tag === "button" && type === "click");
      node.addEventListener(type, acts ? busyWhile(node, value) : value);
    } else if (name === "value") {
      node.value = value;
    } else if (name === "checked") {
      node.checked = Boolean(value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, ...children);
  return node;
}

/** `action` as a listener of `node` (a form or a button) that no second press reaches while
 * its request is out: the node is `aria-busy`, its buttons `aria-disabled` (they keep their
 * focus and their own `disabled` state), and a press or an Enter meanwhile does nothing. */
export function busyWhile(node, action) {
  return (event) => {
    if (node.getAttribute("aria-busy") === "true") {
      event.preventDefault();
      event.stopImmediatePropagation();
      return undefined;
    }
    const outcome = action(event);
    if (!outcome || typeof outcome.then !== "function") return outcome;
    const controls = node.tagName === "FORM" ? [...node.querySelectorAll("button")] : [node];
    node.setAttribute("aria-busy", "true");
    for (const control of controls) control.setAttribute("aria-disabled", "true");
    const done = () => {
      node.removeAttribute("aria-busy");
      for (const control of controls) control.removeAttribute("aria-disabled");
    };
    outcome.then(done, done);
    return outcome;
  };
}

/** Children added as `h` adds them: nested lists flattened, null/false skipped, text as text.
 * (The DOM's own `append` would write null as "null" and a list as its string.) */
export function append(node, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

export function uid(prefix) {
  nextId += 1;
  return `${prefix}-${nextId}`;
}

/** A labelled control: the label names it for screen readers and for the tests. */
export function field(label, control, hint) {
  const id = control.id || uid("f");
  control.id = id;
  let hintNode = null;
  if (hint) {
    hintNode = h("small", { id: `${id}-hint`, class: "hint" }, hint);
    control.setAttribute("aria-describedby", hintNode.id);
  }
  return h("div", { class: "field" }, h("label", { for: id }, label), control, hintNode);
}

export function button(label, onclick, props = {}) {
  return h("button", { type: "button", ...props, onclick }, label);
}

/** A button that asks once more before it acts: the second press within the page does it. */
export function confirmButton(label, confirmLabel, action, props = {}) {
  const node = button(label, async () => {
    if (node.dataset.armed !== "yes") {
      node.dataset.armed = "yes";
      node.textContent = confirmLabel;
      if (node.hasAttribute("aria-label")) node.setAttribute("aria-label", confirmLabel);
      return;
    }
    node.disabled = true;
    try {
      await action();
    } finally {
      node.disabled = false;
    }
  }, props);
  return node;
}

/**
 * A change to a listed item: make it, reload the listing, and only then say what happened, so the
 * message describes the table the user now sees (and a button pressed after the message is one of
 * the new table's, not of the old one the reload replaces). `change` returns the message.
 */
export async function changeAndReload(ctx, reload, change) {
  let message = null;
  try {
    message = await change();
  } catch (error) {
    ctx.error(error);
  }
  await reload();
  if (message) ctx.status(message);
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

/** Any value as readable text: strings as they are, everything else as JSON. */
export function asText(value) {
  if (value === undefined || value === null) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

export function table(caption, columns, rows) {
  return h(
    "table",
    {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))),
  );
}

export function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

export function list(values) {
  return (values || []).join(", ");
}

/** "1 tool", "2 tools": `plural` when it is not `word` + "s". */
export function count(n, word, plural = `${word}s`) {
  return `${n} ${n === 1 ? word : plural}`;
}

/** "a, b , c" -> ["a", "b", "c"] (empty entries dropped). */
export function splitList(text) {
  return text.split(",").map((part) => part.trim()).filter(Boolean);
}
