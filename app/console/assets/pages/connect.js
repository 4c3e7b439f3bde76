// #/connect/<sign-in>: the consent page of toolgate's own OAuth server, where an MCP client
// added by URL (Claude, ChatGPT, Cursor...) is sent to during its sign-in; and
// #/connect/link/<link>: a connect link opened in this browser. Both work without signing in:
// the link is the credential. The person allows the client with the link their tenant gave them
// (or denies it); the browser then goes back to the client. A link opened first is kept in this
// browser (local storage) until a sign-in uses it or it is a day old.
import { api } from "../api.js";
import { append, asText, button, clear, field, h, when } from "../dom.js";

const LINK_KEY = "toolgate.console.connect-link";
const LINK_SHAPE = /tgl_[A-Za-z0-9_-]{43}/;
const KEPT_MS = 24 * 3600 * 1000;

function keptLink() {
  try {
    const kept = JSON.parse(localStorage.getItem(LINK_KEY) || "null");
    if (kept && Date.now() - kept.saved < KEPT_MS) return kept.link;
  } catch {
    // nothing usable kept
  }
  localStorage.removeItem(LINK_KEY);
  return "";
}

function linkOpened(main, code) {
  if (LINK_SHAPE.test(code)) localStorage.setItem(LINK_KEY, JSON.stringify({ link: code, saved: Date.now() }));
  append(main, h("h1", {}, "Connect an MCP client"),
    h("div", { class: "card narrow" },
      h("p", {}, "This browser now holds your connect link. In your MCP client (Claude, ChatGPT, "
        + "Claude Code, Cursor...), add the server by the URL you were given, ending in /mcp/<tenant>."),
      h("p", {}, "When the client opens toolgate's consent page in this browser, the link is filled "
        + "in: check the client's name and allow it. The link works once."),
      h("p", { class: "hint" }, "No sign-in is open yet: this page can be closed.")));
}

async function consent(main, requestId, ctx) {
  const problem = h("div", { "aria-live": "polite" });
  const signIn = await api("GET", `/oauth/requests/${encodeURIComponent(requestId)}`);
  const link = h("input", {
    name: "link", class: "code wide", autocomplete: "off", spellcheck: "false", value: keptLink(),
  });
  const decide = async (allow) => {
    try {
      const answer = await api("POST", "/oauth/consent", { request: requestId, link: link.value.trim(), allow });
      if (allow) localStorage.removeItem(LINK_KEY);
      ctx.status(allow ? "Allowed: going back to the client." : "Denied: going back to the client.");
      window.location.assign(answer.redirect_to);
    } catch (error) {
      ctx.error(error, problem);
    }
  };
  const allowButton = h("button", { type: "submit" }, "Allow");
  const form = h("form", { class: "card narrow", onsubmit: (event) => { event.preventDefault(); decide(true); } },
    h("p", {}, h("strong", {}, asText(signIn.client_name || signIn.client_id)),
      " wants to use your tools through toolgate."),
    h("dl", {},
      h("dt", {}, "Client"), h("dd", { class: "code" }, asText(signIn.client_id)),
      h("dt", {}, "Returns to"), h("dd", { class: "code" }, asText(signIn.redirect_host)),
      h("dt", {}, "Server"), h("dd", { class: "code" }, asText(signIn.resource || "(not said)")),
      h("dt", {}, "Expires"), h("dd", {}, when(signIn.expires_at))),
    field("Connect link", link,
      "The link your tenant's admin gave you (https://.../console/#/connect/link/tgl_...). "
      + "Only allow a client you are adding yourself, right now."),
    h("div", { class: "actions" }, allowButton, button("Deny", () => decide(false))),
    problem);
  append(main, h("h1", {}, "Allow this MCP client?"), form);
  (link.value ? allowButton : link).focus();
}

export const connectPage = {
  id: "connect",
  title: "Connect an MCP client",
  hash: "connect",
  roles: [],
  public: true,
  nav: false,
  async render(main, params, ctx) {
    clear(main);
    if (params[0] === "link") linkOpened(main, params[1] || "");
    else await consent(main, params[0] || "", ctx);
  },
};
