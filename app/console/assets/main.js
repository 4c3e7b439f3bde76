// The console's frame: sign in, the navigation, and a page per hash route (#/tools, ...).
import { ApiError, api, exists, session } from "./api.js";
import { append, button, clear, field, h } from "./dom.js";
import { pages } from "./pages/index.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const statusLine = document.getElementById("status");
const available = new Map(); // page id -> whether its probe found the route
// Page loads so far. The status line belongs to the page it was written on: a request of an
// earlier page that ends after the user moved on writes nothing there, and the line is
// emptied when a page opens, unless the message led there (`go`: "Saved x." above x's page).
let generation = 0;
let carried = false;

const ROLE_NAMES = { tenant: "tenant key", client: "client token", admin: "admin key" };

function show(message, bad) {
  statusLine.classList.toggle("bad", bad);
  statusLine.textContent = message;
}

/** What a page gets to report with: its messages count only while it is the page shown. */
function contextFor(mine) {
  const current = () => mine === generation;
  return {
    status(message) {
      if (current()) show(message, false);
    },
    /** An error where the page shows it (an ApiError's detail and paths) and on the status line. */
    error(error, into) {
      if (error instanceof ApiError && error.status === 401 && session.get()) {
        // The key was rotated or the token revoked while this tab held it: sign in again.
        session.clear();
        available.clear();
        route().then(() => ctx.error(error, document.querySelector("main form div[aria-live]")));
        return;
      }
      const lines = error instanceof ApiError ? error.lines() : [String(error?.message || error)];
      if (current()) show(lines[0], true);
      if (into) {
        append(clear(into), h("div", { class: "problem", role: "alert" },
          h("strong", {}, lines[0]),
          lines.length > 1 ? h("ul", {}, lines.slice(1).map((l) => h("li", {}, l))) : null));
      }
    },
    go(hash) {
      carried = current();
      if (location.hash === hash) route();
      else location.hash = hash;
    },
    signIn,
    role: () => session.get()?.role,
  };
}

/** The frame's own context (sign in and out): always the page shown. */
export const ctx = {
  status: (message) => contextFor(generation).status(message),
  error: (error, into) => contextFor(generation).error(error, into),
  go: (hash) => contextFor(generation).go(hash),
  signIn,
  role: () => session.get()?.role,
};

/** Which kind of credential `key` is: a client token by its prefix, else whatever the service
 * accepts it as (a tenant route, else an admin route). */
async function identify(key) {
  if (key.startsWith("tgc_")) return "client";
  try {
    await api("GET", "/tools/ids", undefined, { key });
    return "tenant";
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 403) throw error;
  }
  await api("GET", "/tenants?limit=1", undefined, { key });
  return "admin";
}

async function signIn(key, label) {
  const role = await identify(key);
  session.save({ key, role, label: label || ROLE_NAMES[role] });
  available.clear();
  ctx.status(`Signed in with a ${ROLE_NAMES[role]}.`);
  ctx.go(role === "tenant" ? "#/tools" : role === "client" ? "#/chat" : "#/tenants");
}

function signInPage() {
  const input = h("input", {
    type: "password", name: "credential", autocomplete: "off", spellcheck: "false", required: true,
  });
  const problem = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "card narrow", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await signIn(input.value.trim());
    } catch (error) {
      ctx.error(error, problem);
    }
  } },
  field("Key or token", input,
    "A tenant key (tg_...), a client token (tgc_...) or the admin key. It stays in this tab "
    + "only (session storage) and is sent as the Authorization header."),
  h("button", { type: "submit" }, "Sign in"), problem);
  append(clear(main), h("h1", { tabindex: "-1" }, "Sign in"), form,
    h("p", {}, "Everything here is a request to the public API; ",
      h("a", { href: "../docs" }, "/docs"), " lists them."));
  input.focus();
}

async function visible(page, role) {
  if (!page.roles.includes(role)) return false;
  if (!page.probe) return true;
  if (!available.has(page.id)) available.set(page.id, await exists(page.probe));
  return available.get(page.id);
}

async function renderNav(current, role) {
  const links = [];
  for (const page of pages) {
    if (page.nav === false || !(await visible(page, role))) continue;
    links.push(h("a", { href: `#/${page.hash}`, "aria-current": page === current ? "page" : null },
      page.title));
  }
  const signOut = button("Sign out", () => {
    session.clear();
    available.clear();
    ctx.status("Signed out.");
    carried = true;
    route();
  });
  append(clear(nav), ...links);
  append(clear(who), h("span", {}, session.get().label), signOut);
}

async function route() {
  const mine = ++generation;
  if (!carried) show("", false);
  carried = false;
  const credential = session.get();
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  // A public page (the OAuth consent page) needs no sign-in: its link is its credential.
  const open = pages.find((p) => p.public && p.hash === parts[0]);
  if (!credential && !open) {
    clear(nav);
    clear(who);
    document.title = "Sign in - toolgate console";
    signInPage();
    return;
  }
  let page = open || pages.find((p) => p.hash === parts[0] && p.roles.includes(credential.role));
  if (!page) page = pages.find((p) => p.roles.includes(credential.role) && p.nav !== false);
  if (credential) await renderNav(page, credential.role);
  if (mine !== generation) return; // the user moved on while the navigation was drawn
  document.title = `${page.title} - toolgate console`;
  // The page draws into a view of its own: what an earlier page adds late lands in its own
  // view, no longer shown, never in this one.
  const view = h("div", { class: "view" });
  append(clear(main), view);
  const pageCtx = contextFor(mine);
  try {
    await page.render(view, parts.slice(1), pageCtx);
  } catch (error) {
    pageCtx.error(error, view.appendChild(h("div")));
  }
  if (mine !== generation) return;
  // Move focus to the page's heading, so keyboard and screen-reader users start there.
  view.querySelector("h1")?.setAttribute("tabindex", "-1");
  view.querySelector("h1")?.focus();
}

window.addEventListener("hashchange", route);
route();
