// Every page of the console, in navigation order. A page is
//   {id, title, hash, roles, render(main, params, ctx), nav?, probe?}
// `roles`: which credentials see it ("tenant", "client", "admin"); `public`: shown without signing
// in (its link is its credential). `probe`: a GET path; the page
// is listed only when the service has that route, so a page for a feature a newer service adds
// can ship before the service does, and stays hidden until then.
import { categoriesPage } from "./categories.js";
import { chatPage } from "./chat.js";
import { connectPage } from "./connect.js";
import { editorPage } from "./editor.js";
import { identityPage } from "./identity.js";
import { importPage } from "./import.js";
import { invokePage } from "./invoke.js";
import { mcpServersPage } from "./mcp-servers.js";
import { providersPage } from "./providers.js";
import { runsPage } from "./runs.js";
import { secretsPage } from "./secrets.js";
import { tenantsPage } from "./tenants.js";
import { tokensPage } from "./tokens.js";
import { toolsPage } from "./tools.js";
import { usagePage } from "./usage.js";

export const pages = [
  toolsPage,
  editorPage,
  importPage,
  invokePage,
  chatPage,
  runsPage,
  usagePage,
  tokensPage,
  identityPage,
  secretsPage,
  mcpServersPage,
  categoriesPage,
  providersPage,
  tenantsPage,
  connectPage,
];

/** For a later page: `registerPage({...})` before the first route is drawn. */
export function registerPage(page, before = "tenants") {
  const at = pages.findIndex((p) => p.id === before);
  pages.splice(at < 0 ? pages.length : at, 0, page);
}
