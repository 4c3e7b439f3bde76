// #/identity: who the tenant's end users are. Its identity provider (PUT /identity: whose JWTs
// stand for an end user, which claims become context values), a box that shows what a pasted
// token would bind (checked by the service exactly as a request's token, signature included),
// and connect links: how an MCP client added by URL is bound to one of the client tokens.
import { ApiError, api } from "../api.js";
import { append, asText, button, clear, confirmButton, count, field, h, json, splitList, table, when } from "../dom.js";

function providerForm(current, onSaved, ctx) {
  const problem = h("div", { "aria-live": "polite" });
  const issuer = h("input", { name: "issuer", class: "wide", required: true, value: current?.issuer || "", placeholder: "https://acme.okta.com" });
  const jwks = h("input", { name: "jwks_uri", class: "wide", value: current && !current.jwks_discovered ? current.jwks_uri : "" });
  const audience = h("input", { name: "audience", class: "wide", value: current?.audience || "" });
  const claims = h("textarea", {
    name: "claims", rows: 3, class: "code", placeholder: '{"user_id": "sub", "org": "org_id"}',
    value: current ? json(current.claims) : "",
  });
  const required = h("input", { name: "required_claims", value: (current?.required_claims || []).join(", ") });
  const algorithms = h("input", { name: "algorithms", value: (current?.algorithms || ["RS256", "ES256"]).join(", ") });
  const submit = async (event) => {
    event.preventDefault();
    try {
      const body = { issuer: issuer.value.trim(), algorithms: splitList(algorithms.value) };
      if (jwks.value.trim()) body.jwks_uri = jwks.value.trim();
      if (audience.value.trim()) body.audience = audience.value.trim();
      if (claims.value.trim()) body.claims = JSON.parse(claims.value);
      if (splitList(required.value).length) body.required_claims = splitList(required.value);
      const saved = await api("PUT", "/identity", body);
      await onSaved(); // the page drawn again, then said: what it says is on the page
      ctx.status(`Trusting ${saved.issuer}.`);
    } catch (error) {
      ctx.error(error, problem);
    }
  };
  return h("form", { class: "card", onsubmit: submit }, h("h2", {}, "Identity provider"),
    field("Issuer", issuer, "Its tokens' `iss`, exactly."),
    field("JWKS URL (empty: OIDC discovery)", jwks, "Where its signing keys are; read through the tenant's outbound policy."),
    field("Audience (empty: this tenant's /mcp/{tenant_id} URL)", audience, "The `aud` its tokens must carry."),
    field("Claims bound as context (JSON: context parameter -> claim)", claims,
      "A request cannot set or override them, as with a client token's context."),
    field("Required claims (comma-separated)", required),
    field("Algorithms (comma-separated; asymmetric only)", algorithms),
    h("div", { class: "actions" }, h("button", { type: "submit" }, current ? "Save provider" : "Trust provider"),
      current ? confirmButton("Remove", "Remove the provider?", async () => {
        try {
          await api("DELETE", "/identity");
          await onSaved();
          ctx.status("No identity provider is trusted now.");
        } catch (error) {
          ctx.error(error, problem);
        }
      }) : null),
    problem);
}

function tokenTest(ctx) {
  const answer = h("div", { "aria-live": "polite" });
  const token = h("textarea", { name: "token", rows: 4, class: "code", spellcheck: "false", placeholder: "eyJ..." });
  const submit = async (event) => {
    event.preventDefault();
    try {
      const result = await api("POST", "/identity/test", { token: token.value.trim() });
      const names = Object.keys(result.context || {});
      append(clear(answer), h("section", { class: result.accepted ? "result ok" : "result bad", "aria-label": "Token test" },
        h("h2", {}, result.accepted ? "Accepted" : "Refused"),
        result.accepted
          ? h("dl", {}, h("dt", {}, "Subject"), h("dd", {}, asText(result.subject)),
            h("dt", {}, "Expires"), h("dd", {}, when(result.expires_at)))
          : h("p", {}, asText(result.reason)),
        result.accepted ? table(count(names.length, "bound context value"), ["Context parameter", "Value"],
          names.map((name) => [asText(name), asText(result.context[name])])) : null));
    } catch (error) {
      ctx.error(error, answer);
    }
  };
  return h("form", { class: "card", onsubmit: submit }, h("h2", {}, "Test a token"),
    field("JWT", token, "Checked as a request's token is (signature, issuer, audience, times): nothing is skipped."),
    h("button", { type: "submit" }, "Test token"), answer);
}

function connectLinks(tokens, ctx) {
  const shown = h("div", { "aria-live": "polite" });
  const make = (token) => async () => {
    try {
      const link = await api("POST", `/client-tokens/${encodeURIComponent(token.token_id)}/connect-link`);
      const url = h("input", { readonly: true, value: link.url, class: "code wide", name: "connect_link" });
      append(clear(shown), h("div", { class: "card ok" },
        field(`Connect link for ${token.name}: works once, until ${when(link.expires_at)}`, url),
        h("p", {}, "Server URL to add in the client: ", h("code", {}, asText(link.resource)))));
      url.select();
      ctx.status(`Made a connect link for ${token.name}.`);
    } catch (error) {
      ctx.error(error, shown);
    }
  };
  return h("section", { class: "card" }, h("h2", {}, "Connect an MCP client by URL"),
    h("p", { class: "hint" }, "Without an identity provider, clients that add this tenant's /mcp/{tenant_id} by URL "
      + "sign in with toolgate: a connect link binds the client to a client token (its context and tools). "
      + "Revoking the token ends the client's access."),
    table(count(tokens.length, "client token"), ["Name", "Token id", "Expires", ""],
      tokens.map((t) => [asText(t.name), asText(t.token_id), when(t.expires_at) || "never",
        button("Connect link", make(t), { "aria-label": `Connect link for ${t.name}` })])),
    shown);
}

export const identityPage = {
  id: "identity",
  title: "Identity",
  hash: "identity",
  roles: ["tenant"],
  async render(main, params, ctx) {
    const body = h("div");
    const reload = async () => {
      let current = null;
      try {
        current = await api("GET", "/identity");
      } catch (error) {
        if (!(error instanceof ApiError) || error.status !== 404) throw error;
      }
      const tokens = await api("GET", "/client-tokens");
      append(clear(body), providerForm(current, reload, ctx), tokenTest(ctx), connectLinks(tokens, ctx));
    };
    append(main, h("h1", {}, "Identity"),
      h("p", {}, "End users reach the tools with a client token, a JWT of the identity provider below, "
        + "or, in MCP clients that connect by URL, through a connect link."), body);
    await reload();
  },
};
