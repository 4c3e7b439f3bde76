// A real OpenID provider for the tests: oidc-provider (npm), as a tenant's identity provider.
// `node oidc_provider.mjs PORT`: the issuer is http://127.0.0.1:PORT. Clients register by RFC
// 7591; an authorization request naming a resource (RFC 8707) gets a JWT access token for it,
// with its account's `org_id`; the person signs in and consents on its development pages (any
// login name, any password). Everything is in memory and its signing keys are its development
// keys: a test provider, never a production one.
import Provider from "oidc-provider";

const port = Number(process.argv[2]);
const issuer = `http://127.0.0.1:${port}`;
const provider = new Provider(issuer, {
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, client, oneOf) => oneOf,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => ({
        scope: "mcp",
        audience: resource,
        accessTokenTTL: 300,
        accessTokenFormat: "jwt",
        jwt: { sign: { alg: "RS256" } },
      }),
    },
  },
  scopes: ["openid", "offline_access", "mcp"],
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  extraTokenClaims: async (ctx, token) => ({ org_id: `org-${token.accountId}` }),
  pkce: { required: () => true },
  cookies: { keys: ["toolgate-test-only"] },
});
provider.listen(port, "127.0.0.1", () => console.log("ready"));
