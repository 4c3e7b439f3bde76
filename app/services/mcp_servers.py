"""MCP servers a tenant may use: the operator's (read-only to tenants) and its own (HTTP only)."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from app.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ServiceUnavailableError,
    UnprocessableError,
    field_error,
)
from app.http.netguard import OutboundPolicy, url_problems
from app.kit.crypto import SecretBox, UnsealError, associated_data
from app.limits.local import Fence, local_fence
from app.mcp.config import McpServer
from app.mcp.hub import McpHub, McpTimeoutError, McpUnavailableError
from app.mcp.tools import mcp_tool_document
from app.repositories.mcp_servers import McpServerRepository
from app.schemas.fields import Provider
from app.schemas.mcp import (
    McpServerCreate,
    McpServerFields,
    McpServerOut,
    McpServerTest,
    McpServerToolSeen,
    McpServerUpdate,
)
from app.services.outbound import TenantOutbound
from app.services.secrets import ResealReport
from app.tools.typed import McpServerTool

logger = logging.getLogger(__name__)

MASK = "****"
SHOWN_SUFFIX = 4
MIN_LENGTH_TO_SHOW_SUFFIX = 16


def masked(value: str) -> str:
    """A header value as GET shows it: never in full; the last 4 characters of long ones."""
    if len(value) >= MIN_LENGTH_TO_SHOW_SUFFIX:
        return MASK + value[-SHOWN_SUFFIX:]
    return MASK


class McpServerService:
    def __init__(
        self,
        *,
        servers: McpServerRepository,
        operator: dict[str, McpServer],
        hub: McpHub,
        outbound: TenantOutbound,
        box: SecretBox,
        max_servers: int = 20,
        fence: Fence | None = None,
    ) -> None:
        self._servers = servers
        self._box = box
        self._max_servers = max_servers
        self._fence = fence or local_fence()
        self._operator = operator
        self._hub = hub
        self._outbound = outbound

    def _operator_for(self, tenant_id: str) -> dict[str, McpServer]:
        return {n: s for n, s in self._operator.items() if s.available_to(tenant_id)}

    async def create(self, body: McpServerCreate, *, tenant_id: str) -> McpServerOut:
        await self._check_url(body.url, tenant_id)
        if body.name in self._operator_for(tenant_id):
            raise ConflictError(f"'{body.name}' is the name of a server the operator provides")
        document = self._document(body.name, body, body.headers, tenant_id)
        warnings = await self._selection_warnings(body, document, body.headers, tenant_id)
        async with self._fence(tenant_id, "MCP servers"):  # the cap holds exactly
            if await self._servers.count(tenant_id=tenant_id) >= self._max_servers:
                raise ConflictError(
                    f"the tenant already has {self._max_servers} MCP servers "
                    "(MAX_MCP_SERVERS_PER_TENANT); delete one first"
                )
            stored = await self._servers.insert(document, tenant_id=tenant_id)
        return self._shown_stored(stored, tenant_id, warnings)

    async def replace(self, name: str, body: McpServerUpdate, *, tenant_id: str) -> McpServerOut:
        """Replace one of the tenant's servers but for its name (and, when `headers` is left
        out, its stored header values); the same checks as `create`."""
        if name in self._operator_for(tenant_id):
            raise ForbiddenError(f"'{name}' is configured by the operator and cannot be changed")
        stored = await self._servers.get(name, tenant_id=tenant_id)
        if stored is None:
            raise NotFoundError(f"no MCP server named '{name}'")
        await self._check_url(body.url, tenant_id)
        headers = body.headers
        if headers is None:
            headers = self._server(stored, tenant_id).headers
            if headers and _origin(body.url) != _origin(stored["url"]):
                raise UnprocessableError(
                    "The server's headers must be given again.",
                    errors=[
                        field_error(
                            "$.headers",
                            "the URL moves to another origin: the stored values were sent "
                            f"to {_origin(stored['url'])} only",
                        )
                    ],
                )
        document = self._document(name, body, headers, tenant_id)
        warnings = await self._selection_warnings(body, document, headers, tenant_id)
        replaced = await self._servers.replace(name, document, tenant_id=tenant_id)
        if replaced is None:  # deleted meanwhile
            raise NotFoundError(f"no MCP server named '{name}'")
        self._hub.forget(McpServer.from_tenant_document({**stored, "headers": {}}))
        return self._shown_stored(replaced, tenant_id, warnings)

    async def _check_url(self, url: str, tenant_id: str) -> None:
        problems = url_problems(url, await self._outbound.policy(tenant_id))
        if problems:
            raise UnprocessableError(
                "The server's URL is not allowed.",
                errors=[field_error("$.url", problem) for problem in problems],
            )

    def _document(
        self, name: str, body: McpServerFields, headers: dict[str, str], tenant_id: str
    ) -> dict[str, Any]:
        """What is stored: header values sealed, a new revision (cached lists and pooled
        sessions of an earlier one are never used for it)."""
        return {
            **body.model_dump(exclude={"headers"}),
            "name": name,
            "headers": {
                header: self._box.seal(value, _header_aad(tenant_id, name, header))
                for header, value in headers.items()
            },
            "context": {k: v.model_dump(exclude_none=True) for k, v in body.context.items()},
            "revision": uuid.uuid4().hex,
        }

    def _shown_stored(
        self, stored: dict[str, Any], tenant_id: str, warnings: list[str]
    ) -> McpServerOut:
        shown = _shown_document(self._server(stored, tenant_id), stored)
        return shown.model_copy(update={"warnings": warnings}) if warnings else shown

    async def _selection_warnings(
        self,
        body: McpServerFields,
        document: dict[str, Any],
        headers: dict[str, str],
        tenant_id: str,
    ) -> list[str]:
        """`include`/`exclude` naming a tool the server does not list: 422. The server is asked
        within the listing deadline; if it cannot answer then, the entry is taken with a
        warning saying the names were not checked."""
        named = set(body.include or ()) | set(body.exclude)
        if not named:
            return []
        policy = await self._outbound.policy(tenant_id)
        probe = dataclasses.replace(  # every tool it lists, none filtered out
            McpServer.from_tenant_document({**document, "headers": dict(headers)}),
            include=None,
            exclude=frozenset(),
            policy=policy,
        )
        found, skipped = await self._hub.reachable_tools([probe], {}, tenant_id=tenant_id)
        if skipped:
            reason = next(iter(skipped.values())).message
            return [f"include/exclude not checked against the server's tools: {reason}"]
        listed = {tool.name for _, tools in found for tool in tools}
        included = set(body.include or ())
        errors = [
            field_error("$.include" if name in included else "$.exclude", f"no tool '{name}'")
            for name in sorted(named - listed)
        ]
        if errors:
            raise UnprocessableError(
                "The server does not list some tools named in include/exclude.", errors=errors
            )
        return []

    def _server(
        self, doc: dict[str, Any], tenant_id: str, policy: OutboundPolicy | None = None
    ) -> McpServer:
        """A stored server with its header values opened (they are sealed at rest), and the
        tenant's outbound policy when it is going to be connected to."""
        name = doc["name"]
        opened = {}
        for header, sealed in doc.get("headers", {}).items():
            try:
                opened[header] = self._box.open(sealed, _header_aad(tenant_id, name, header))
            except UnsealError as exc:
                logger.error("tenant %s: MCP server '%s' %s: %s", tenant_id, name, header, exc)
                raise ServiceUnavailableError(
                    f"the stored credentials of MCP server '{name}' cannot be decrypted "
                    "(SECRETS_KEY changed without SECRETS_OLD_KEYS?)"
                ) from None
        server = McpServer.from_tenant_document({**doc, "headers": opened})
        return server if policy is None else dataclasses.replace(server, policy=policy)

    async def all(self, *, tenant_id: str) -> list[McpServerOut]:
        shown = [_shown(s) for s in self._operator_for(tenant_id).values()]
        shown += [
            _shown_document(self._server(doc, tenant_id), doc)
            for doc in await self._servers.all(tenant_id=tenant_id)
        ]
        return sorted(shown, key=lambda s: s.name)

    async def get(self, name: str, *, tenant_id: str) -> McpServerOut:
        operator = self._operator_for(tenant_id).get(name)
        if operator is not None:
            return _shown(operator)
        doc = await self._servers.get(name, tenant_id=tenant_id)
        if doc is None:
            raise NotFoundError(f"no MCP server named '{name}'")
        return _shown_document(self._server(doc, tenant_id), doc)

    async def delete(self, name: str, *, tenant_id: str) -> None:
        if name in self._operator_for(tenant_id):
            raise ForbiddenError(f"'{name}' is configured by the operator and cannot be deleted")
        doc = await self._servers.delete(name, tenant_id=tenant_id)
        if doc is None:
            raise NotFoundError(f"no MCP server named '{name}'")
        self._hub.forget(McpServer.from_tenant_document({**doc, "headers": {}}))

    async def usable(self, *, tenant_id: str) -> list[McpServer]:
        """Every server the tenant may use: the operator's open to it, then its own."""
        servers = list(self._operator_for(tenant_id).values())
        own = [doc for doc in await self._servers.all(tenant_id=tenant_id) if _enabled(doc)]
        if own:
            policy = await self._outbound.policy(tenant_id)
            servers += [self._server(doc, tenant_id, policy) for doc in own]
        return servers

    async def resolve(self, names: list[str], *, tenant_id: str, path: str) -> list[McpServer]:
        """The named servers, or a 422 naming every one the tenant cannot use."""
        operator = self._operator_for(tenant_id)
        found: list[McpServer] = []
        missing: list[str] = []
        disabled: list[str] = []
        for name in dict.fromkeys(names):
            if name in operator:
                found.append(operator[name])
                continue
            doc = await self._servers.get(name, tenant_id=tenant_id)
            if doc is None:
                missing.append(name)
            elif not _enabled(doc):
                disabled.append(name)
            else:
                policy = await self._outbound.policy(tenant_id)
                found.append(self._server(doc, tenant_id, policy))
        if missing or disabled:
            why = [("unknown", missing), ("disabled", disabled)]
            raise UnprocessableError(
                "Some requested MCP servers do not exist or are disabled."
                if disabled
                else "Some requested MCP servers do not exist.",
                errors=[field_error(path, f"{w}: {', '.join(n)}") for w, n in why if n],
            )
        return found

    async def _named(self, name: str, *, tenant_id: str) -> McpServer:
        """One server the tenant has, enabled or not, ready to connect to; else a 404."""
        operator = self._operator_for(tenant_id).get(name)
        if operator is not None:
            return operator
        doc = await self._servers.get(name, tenant_id=tenant_id)
        if doc is None:
            raise NotFoundError(f"no MCP server named '{name}'")
        return self._server(doc, tenant_id, await self._outbound.policy(tenant_id))

    async def tools(self, name: str, *, tenant_id: str) -> list[McpServerTool]:
        """The server's tools, typed (connects unless the list is cached); 404 for a server the
        tenant cannot use."""
        server = await self._named(name, tenant_id=tenant_id)
        tools = await self._hub.server_tools(server, {}, tenant_id=tenant_id)
        return await self._hub.typed_tools(server, tools)  # off the event loop, kept

    async def test(self, name: str, *, tenant_id: str) -> McpServerTest:
        """Connect now (its cached list set aside) and list the server's tools as a chat would
        be offered them, or say why that failed."""
        server = await self._named(name, tenant_id=tenant_id)
        self._hub.forget_lists(server)
        started = time.perf_counter()
        tools: list[McpServerToolSeen] = []
        error = None
        try:
            listed = await self._hub.server_tools(server, {}, tenant_id=tenant_id)
        except (McpUnavailableError, McpTimeoutError) as exc:
            error = exc.message
        else:
            tools = [
                McpServerToolSeen(tool_id=t.tool_id, name=t.mcp_tool, description=t.description)
                for t in await self._hub.typed_tools(server, listed)
            ]
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        return McpServerTest(
            name=name, ok=error is None, duration_ms=duration_ms, tools=tools, error=error
        )

    async def tools_json(
        self, name: str, *, tenant_id: str, provider: Provider | None
    ) -> list[dict[str, Any]]:
        """The server's tools as documents, or in a provider's tool format."""
        tools = await self.tools(name, tenant_id=tenant_id)
        if provider is not None:
            return [tool.in_format(provider) for tool in tools]
        return [mcp_tool_document(tool) for tool in tools]

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._servers.drop_all(tenant_id=tenant_id)


async def reseal_mcp_headers(
    servers: McpServerRepository, box: SecretBox, *, tenant_id: str, report: ResealReport
) -> None:
    """Re-seal the header values of the tenant's servers that an old key sealed."""
    for doc in await servers.all(tenant_id=tenant_id):
        sealed: dict[str, str] = doc.get("headers", {})
        if not any(box.needs_resealing(v) for v in sealed.values()):
            report.current += 1
            continue
        try:
            fresh = {
                header: box.seal(box.open(value, aad), aad)
                for header, value in sealed.items()
                for aad in [_header_aad(tenant_id, doc["name"], header)]
            }
        except UnsealError:
            report.failed.append(f"{tenant_id}/mcp-servers/{doc['name']}")
            continue
        if await servers.reseal_headers(doc["name"], sealed, fresh, tenant_id=tenant_id):
            report.resealed += 1


def _header_aad(tenant_id: str, server: str, header: str) -> bytes:
    return associated_data(tenant_id, "mcp", server, header.lower())


def _enabled(doc: dict[str, Any]) -> bool:
    return bool(doc.get("enabled", True))  # entries stored before `enabled` existed: enabled


def _origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port: where header values go."""
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def _shown_document(server: McpServer, doc: dict[str, Any]) -> McpServerOut:
    return _shown(server, doc.get("created_at"), doc.get("updated_at"), enabled=_enabled(doc))


def _shown(
    server: McpServer, created_at: Any = None, updated_at: Any = None, *, enabled: bool = True
) -> McpServerOut:
    """What a tenant sees of a server: never header values, nor an operator's command or env."""
    shown: dict[str, Any] = {
        "name": server.name,
        "type": server.type,
        "source": server.source,
        "description": server.description,
        "context": server.context,
        "include": None if server.include is None else sorted(server.include),
        "exclude": sorted(server.exclude),
    }
    if server.source == "tenant":
        shown["url"] = server.url
        shown["headers"] = {k: masked(v) for k, v in server.headers.items()}
        shown["created_at"] = created_at
        shown["updated_at"] = updated_at
    return McpServerOut(**shown, enabled=enabled)
