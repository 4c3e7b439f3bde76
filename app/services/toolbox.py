"""The one place that assembles a caller's tools: which tools, with which context, secrets, MCP
sessions and HTTP client.

Every entry point that runs tools opens a `Toolset` here: `POST /chat` (the request's
selection), `POST /tools/{tool_id}/invoke` (one tool, disabled ones too) and `/mcp` (`tools/list`:
everything the caller may use; `tools/call`: one tool by name). The rules it applies, once:

- **Selection.** Stored tools (enabled ones of enabled categories, `default` always on; or
  any readable one for invoke), filtered by ids and tags; categories win over `tool_ids`: an id
  of a disabled category's tool is unavailable like a disabled tool's. MCP tools of the
  servers named in `mcp_servers`, or picked one by one as `{server}__{tool}` ids (`server_of`,
  the one parser of that shape). A requested id that is not there is `UnavailableToolsError`
  (422 in a chat, 404 for invoke and `/mcp`).
- **A client token** is one filter: only the tools it selects exist for its caller, and it
  cannot add MCP servers to a chat (403).
- **The context contract.** Without a token, the caller's `context_arguments` are the context.
  With a token, hidden values come from the token: a request value for a name the token binds
  is ignored (the token's wins), a name the token lists in `settable_context` is taken from the
  request, and any other name is refused (422 naming the field) before anything runs.
  Whatever the caller: a secret-backed parameter takes the tenant's secret, and a preset (a
  context parameter's `value` in the tool document) takes that value on every call, never the
  caller's or the token's (`merge_context` applies it per tool).
- **Usage hints.** The categories of the stored tools offered (`usage_hints`) become one
  instruction block, a `## {name} tools` section each: what a chat sends, and what
  `GET /categories/hints` shows.
- **One name-clash rule.** Two tools offered under one name are refused, on every entry point:
  422 in a chat, a JSON-RPC error on `/mcp` (`tools/list` and `tools/call`). Nothing is silently
  left out: a model or client would otherwise call a different tool than the one it was shown.
- **Unreachable MCP servers.** A chat or listing goes on without them (`skipped_servers`); a
  one-tool call (invoke, `tools/call`) fails with the server's error (502 or 504).
- **What the run needs,** picked from the tools: the secrets they read, the redaction of every
  hidden value, the tenant's HTTP client when a tool uses HTTP, and MCP sessions (opened on
  first call, closed when the toolset is left).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Awaitable, Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import TracebackType
from typing import Any

from app.errors import (
    AppError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnprocessableError,
    field_error,
)
from app.mcp.config import McpServer, server_of
from app.mcp.hub import McpHub
from app.mcp.sessions import McpSessions
from app.mcp.tools import with_settings
from app.repositories.mcp_tool_settings import McpToolSettingsRepository
from app.schemas.categories import DEFAULT_CATEGORY
from app.schemas.tools import ApprovalMode
from app.services.catalog import CatalogEntry, CategoryState, ToolCatalog, ToolSnapshot
from app.services.client_tokens import ClientToken
from app.services.mcp_servers import McpServerService
from app.services.outbound import TenantOutbound
from app.services.secrets import SecretService
from app.services.tool_search import ToolIndex
from app.tools.executors import CallScope
from app.tools.scrub import NOTHING_HIDDEN, Scrubber
from app.tools.typed import McpServerTool, TypedTool

CONTEXT_PATH = "$.context_arguments"


class UnavailableToolsError(UnprocessableError):
    """Requested tools the caller cannot use: unknown, disabled (or of a disabled category),
    outside its token's selection, of an unknown server, or not listed by their MCP server."""

    @classmethod
    def of(cls, missing: Sequence[str]) -> UnavailableToolsError:
        return cls(
            "Some requested tools do not exist or are disabled (the tool or its category).",
            errors=[field_error("$.tool_ids", f"unavailable: {', '.join(missing)}")],
        )


class NameClashError(UnprocessableError):
    """Two tools of one toolset would be offered under the same name."""

    def __init__(self, name: str) -> None:
        super().__init__(
            "Two tools of this chat would have the same name.",
            errors=[
                field_error("$.mcp_servers", f"'{name}' is offered twice; rename or deselect one")
            ],
        )
        self.name = name


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """Which tools a caller asks for."""

    tool_ids: Sequence[str] | None = None  # None: every tool the caller may use
    tags: Sequence[str] | None = None  # only stored tools with one of these tags
    mcp_servers: Sequence[str] = ()  # every tool of these servers joins
    by_name: bool = False  # `tool_ids` are the names the model sees (MCP clients call by name)
    # An admin testing a tool (invoke): disabled ones run too, an unreadable one is a 409.
    admin: bool = False
    every_server: bool = False  # every server the tenant may use (MCP `tools/list`)
    strict: bool = False  # an unreachable server is an error, not a skip (one-tool calls)
    # Chats: past this many stored tools offered (no `tool_ids`), only the `default` category's
    # are offered at first and the others are found by `search_tools` (`DeferredTools`).
    search_over: int | None = None


@dataclass(frozen=True, slots=True)
class UsageHints:
    """The instruction block of a run's categories: None when none has hints."""

    categories: list[str]
    content: str | None


class DeferredTools:
    """The stored tools a chat may use but is not offered at first, found by `search_tools`:
    ranked by the snapshot's index, each candidate put through the same rule as the offered
    ones (`usable`: enabled, its category on, the client token's selection)."""

    def __init__(
        self,
        index: Callable[[], Awaitable[ToolIndex]],
        usable: Callable[[TypedTool], bool],
        by_name: Mapping[str, Sequence[TypedTool]],
        count: int,
    ) -> None:
        self._index = index
        self._usable = usable
        self._by_name = by_name
        self.count = count  # how many there are (the chat's record says it)

    async def search(self, query: str, *, limit: int, offered: Container[str]) -> list[TypedTool]:
        """The best `limit` usable tools for `query` that the chat does not offer yet."""
        index = await self._index()

        def allowed(tool: TypedTool) -> bool:
            return tool.name not in offered and self._usable(tool)

        return index.search(query, limit=limit, allowed=allowed)

    def named(self, name: str) -> TypedTool | None:
        """The usable deferred tool called `name`, if there is one (one lookup): a tool an
        earlier search of the conversation revealed."""
        found = [tool for tool in self._by_name.get(name, ()) if self._usable(tool)]
        return found[0] if len(found) == 1 else None


class Toolset:
    """The tools of one run, by name, with the `CallScope` their calls share. Leaving it (or
    `aclose()`) closes the MCP sessions the run opened. A chat over a large catalog has
    `deferred` tools too: `reveal` adds those a search found, with what their calls need."""

    def __init__(
        self,
        tools: list[TypedTool],
        call: CallScope,
        *,
        skipped_servers: dict[str, str],
        sessions: McpSessions | None,
        deferred: DeferredTools | None = None,
        reveal: Callable[[list[TypedTool], CallScope], Awaitable[CallScope]] | None = None,
    ) -> None:
        self.tools = tools
        self._hinted: tuple[Sequence[TypedTool], Mapping[str, CategoryState]] = ((), {})
        self._hints: UsageHints | None = None
        self.by_name = {tool.name: tool for tool in tools}
        self.call = call
        self.skipped_servers = skipped_servers
        self._sessions = sessions
        self.deferred = deferred
        self._reveal = reveal

    async def reveal(self, tools: list[TypedTool]) -> CallScope:
        """Offer `tools` from now on (found by a search): their secrets are resolved and their
        hidden values join the run's redaction. Returns the run's scope from now on."""
        new = [tool for tool in tools if tool.name not in self.by_name]
        if not new or self._reveal is None:
            return self.call
        self.call = await self._reveal(new, self.call)
        self.tools = [*self.tools, *new]
        self.by_name.update((tool.name, tool) for tool in new)
        return self.call

    @property
    def hints(self) -> UsageHints:
        """The usage hints of the stored tools' categories, built when first read (a chat
        reads them; a one-tool call never does)."""
        if self._hints is None:
            self._hints = usage_hints(*self._hinted)
        return self._hints

    def hinted_by(
        self, tools: Sequence[TypedTool], categories: Mapping[str, CategoryState]
    ) -> None:
        self._hinted, self._hints = (tools, categories), None

    @property
    def category_approvals(self) -> dict[str, ApprovalMode]:
        """The approval setting of each of the tenant's categories that has one."""
        return category_approvals(self._hinted[1])

    def only(self) -> TypedTool:
        """The one tool of a one-tool selection."""
        [tool] = self.tools
        return tool

    async def aclose(self) -> None:
        if self._sessions is not None:
            await self._sessions.aclose()

    async def __aenter__(self) -> Toolset:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def category_approvals(categories: Mapping[str, CategoryState]) -> dict[str, ApprovalMode]:
    """The approval setting of each category that has one."""
    return {name: s.approval for name, s in categories.items() if s.approval is not None}


def caller_context(
    requested: Mapping[str, Any], token: ClientToken | None, *, path: str = CONTEXT_PATH
) -> dict[str, Any]:
    """The context a run gets (the contract in this module's docstring)."""
    if token is None:
        return dict(requested)
    refused = sorted(k for k in requested if k not in token.context and k not in token.settable)
    if refused:
        raise UnprocessableError(
            "A client token binds the context: this request may not set these values.",
            errors=[
                field_error(f"{path}.{name}", "not settable with this client token")
                for name in refused
            ],
        )
    settable = {k: v for k, v in requested.items() if k in token.settable}
    return {**settable, **token.context}  # bound server-side: the token's value wins


def hidden_values(
    context: Mapping[str, Any],
    secrets: Mapping[str, str | None],
    servers: Iterable[McpServer] = (),
    tools: Iterable[TypedTool] = (),
) -> list[Any]:
    """What a run must never show or log: its context values, its tools' presets, the secrets
    its tools read and the header values of its MCP servers (a server may echo its headers)."""
    return [
        *context.values(),
        *(slot.preset for tool in tools for slot in tool.context if slot.preset is not None),
        *(value for value in secrets.values() if value),
        *(value for server in servers for value in server.headers.values()),
    ]


class Toolbox:
    """Assembles a caller's tools for a run: the only place that does (see the module doc)."""

    def __init__(
        self,
        *,
        catalog: ToolCatalog,
        mcp: McpServerService,
        hub: McpHub,
        secrets: SecretService,
        outbound: TenantOutbound,
        mcp_settings: McpToolSettingsRepository | None = None,
    ) -> None:
        self._catalog = catalog
        self._mcp = mcp
        self._hub = hub
        self._secrets = secrets
        self._outbound = outbound
        self._mcp_settings = mcp_settings

    async def open(
        self,
        tenant_id: str,
        selection: Selection,
        *,
        token: ClientToken | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Toolset:
        """The caller's toolset; every 4xx of the selection is raised here, before any run."""
        if token is not None and selection.mcp_servers:
            raise ForbiddenError(
                "A client token cannot add MCP servers to a chat; it offers its own tools only."
            )
        merged = caller_context(context or {}, token)
        stored, picked, categories, deferred = await self._stored_tools(tenant_id, selection, token)
        if picked or selection.mcp_servers or selection.every_server:
            servers = await self._servers(tenant_id, selection, picked)
            found, skipped = await self._server_tools(
                tenant_id, servers, picked, merged, selection, token
            )
            found = await self._set_up(tenant_id, found, picked, selection, categories)
            tools = [*stored, *found]
        else:  # stored tools only (a call of one, most chats): no server to ask
            servers, skipped, tools = [], {}, stored
        _check_names(tools)
        if selection.by_name:
            await self._check_served_names(tenant_id, stored, merged, token)
        used = [s for s in servers if s.name not in skipped]
        toolset = await self._toolset(tenant_id, tools, merged, used, skipped, deferred)
        toolset.hinted_by(stored, categories)
        return toolset

    async def listing(
        self,
        tenant_id: str,
        *,
        token: ClientToken | None,
        after: str | None,
        limit: int,
        default_only: int | None = None,
    ) -> tuple[list[TypedTool], bool, dict[str, ApprovalMode]]:
        """One page of every tool the caller may use (MCP `tools/list`), ordered by name: the
        first `limit` named after `after`, whether more follow, and the tenant's categories'
        approval settings (what the page's hints say). The stored tools' order is
        derived once per snapshot, so a page costs its own size (and the MCP servers' lists,
        cached by the hub); a name two tools would share is refused as `open` refuses it.
        `default_only` (with `/mcp`'s search tool): the stored tools a chat offers at once (the
        `default` category's, when they are at most that many)."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        view = ("by-name", None if token is None else (token.tool_ids, token.tags), default_only)

        def ordered() -> _ByName:
            usable = _usable_stored(snapshot, token)
            if default_only is not None:  # with search_tools: what a chat offers at once
                usable = [tool for tool in usable if tool.category == DEFAULT_CATEGORY]
                usable = usable if len(usable) <= default_only else []
            return _by_name(usable)

        named = snapshot.view(view, ordered)
        servers = await self._mcp.usable(tenant_id=tenant_id)
        found, _ = await self._server_tools(tenant_id, servers, {}, {}, Selection(), token)
        found = await self._set_up(tenant_id, found, {}, Selection(), snapshot.categories)
        for tool in found:  # the one name-clash rule, against the stored tools by name
            if tool.name in named.index:
                raise NameClashError(tool.name)
        _check_names(found)
        start = bisect_right(named.names, after) if after is not None else 0
        page = list(named.tools[start : start + limit + 1])
        extra = sorted((t for t in found if after is None or t.name > after), key=lambda t: t.name)[
            : limit + 1
        ]
        merged = sorted([*page, *extra], key=lambda t: t.name)
        return merged[:limit], len(merged) > limit, category_approvals(snapshot.categories)

    async def hints(
        self, tenant_id: str, selection: Selection, *, token: ClientToken | None = None
    ) -> UsageHints:
        """The instruction block a chat of this selection sends (its stored tools' categories)."""
        stored, _, categories, _ = await self._stored_tools(tenant_id, selection, token)
        return usage_hints(stored, categories)

    async def _stored_tools(
        self, tenant_id: str, selection: Selection, token: ClientToken | None
    ) -> tuple[
        list[TypedTool], dict[str, set[str]], dict[str, CategoryState], DeferredTools | None
    ]:
        """The stored tools selected, the `{server}__{tool}` ids picked by server name (an id or
        name of a stored tool is always that tool), the tenant's categories, and the tools a
        chat finds by search (None but past `search_over`)."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        categories = snapshot.categories

        def usable(tool: TypedTool) -> bool:
            return may_use(tool, categories, token, admin=selection.admin)

        if selection.tool_ids is None:
            offered, deferred = self._offered(snapshot, selection, token, tenant_id, usable)
            return offered, {}, categories, deferred
        # Ids (or names) are looked up, not searched for among all the tenant's tools.
        index = snapshot.tools_by_name if selection.by_name else snapshot.tools_by_id
        if len(selection.tool_ids) == 1 and selection.tags is None:  # a call of one tool
            only: list[TypedTool] = [
                tool for tool in index.get(selection.tool_ids[0], ()) if usable(tool)
            ]
            if len(only) == 1:
                return only, {}, categories, None
        wanted: list[str] = []
        picked: dict[str, set[str]] = {}
        found: dict[str, TypedTool] = {}  # by tool_id: a tool asked for twice is chosen once
        for tool_id in selection.tool_ids:
            matches = [tool for tool in index.get(tool_id, ()) if usable(tool)]
            if matches or (server := server_of(tool_id)) is None:
                wanted.append(tool_id)
                found.update((tool.tool_id, tool) for tool in matches)
            else:
                picked.setdefault(server, set()).add(tool_id)
        key = _name if selection.by_name else _tool_id
        chosen = list(found.values())
        if len(chosen) > 1:
            chosen.sort(key=lambda tool: snapshot.order[tool.tool_id])
        missing = sorted(set(wanted) - {key(tool) for tool in chosen})
        if missing and selection.admin:
            _refuse_unreadable(missing, snapshot.by_id)
        if missing:
            raise UnavailableToolsError.of(missing)
        return _tagged(chosen, selection.tags), picked, categories, None

    def _offered(
        self,
        snapshot: ToolSnapshot,
        selection: Selection,
        token: ClientToken | None,
        tenant_id: str,
        usable: Callable[[TypedTool], bool],
    ) -> tuple[list[TypedTool], DeferredTools | None]:
        """Every tool the caller may use (no `tool_ids`), derived once per snapshot and caller
        filter; past `search_over`, only those offered at once, the rest found by search."""
        view = (
            "pool",
            selection.admin,
            None if token is None else (token.tool_ids, token.tags),
            None if selection.tags is None else frozenset(selection.tags),
        )
        pool = snapshot.view(view, lambda: _pool(snapshot, usable, selection.tags))
        if selection.search_over is None or len(pool.tools) <= selection.search_over:
            return list(pool.tools), None
        # The `default` category's tools are offered at once, unless they are too many
        # themselves: then every tool is found by search.
        always = pool.always_on if len(pool.always_on) <= selection.search_over else ()
        deferred = DeferredTools(
            partial(self._catalog.search_index, snapshot, tenant_id=tenant_id),
            usable,
            snapshot.tools_by_name,
            len(pool.tools) - len(always),
        )
        return list(always), deferred

    async def _servers(
        self, tenant_id: str, selection: Selection, picked: dict[str, set[str]]
    ) -> list[McpServer]:
        """The servers whose tools join: all of every usable one (listing), all of the named
        ones, and the servers of picked ids (an unknown server makes its ids unavailable).
        Asked only when there are any (`open`)."""
        if selection.every_server:
            return await self._mcp.usable(tenant_id=tenant_id)
        whole = await self._mcp.resolve(
            list(selection.mcp_servers), tenant_id=tenant_id, path="$.mcp_servers"
        )
        named = {server.name for server in whole}
        for name in named:  # a server named whole offers all its tools, whatever was picked
            picked.pop(name, None)
        try:
            partial = await self._mcp.resolve(list(picked), tenant_id=tenant_id, path="$.tool_ids")
        except UnprocessableError as exc:  # "unknown: ..." names the servers
            raise UnavailableToolsError(exc.message, errors=exc.errors) from None
        return whole + partial

    async def _server_tools(
        self,
        tenant_id: str,
        servers: list[McpServer],
        picked: dict[str, set[str]],
        context: Mapping[str, Any],
        selection: Selection,
        token: ClientToken | None,
    ) -> tuple[list[TypedTool], dict[str, str]]:
        """The servers' tools (listed concurrently): all of a whole server, the picked ones of
        the others; unreachable servers skipped with the reason. A listing waits for each server
        only the listing deadline, and skips servers marked down (`McpHub.reachable_tools`); a
        `strict` one (a one-tool call) waits the connect timeout and raises the failure."""
        if not servers:
            return [], {}
        if selection.strict:
            failures: dict[str, AppError] = {}
            reachable = [
                (s, await self._hub.server_tools(s, dict(context), tenant_id=tenant_id))
                for s in servers
            ]
        else:
            reachable, failures = await self._hub.reachable_tools(
                servers, dict(context), tenant_id=tenant_id
            )
        found: list[TypedTool] = []
        for server, listed in reachable:
            tools: list[TypedTool] = list(await self._hub.typed_tools(server, listed))
            tools = [t for t in tools if token is None or token.selects(t)]
            wanted = picked.get(server.name)
            if wanted is not None:
                missing = sorted(wanted - {t.tool_id for t in tools})
                if missing:
                    raise UnavailableToolsError.of(missing)
                tools = [t for t in tools if t.tool_id in wanted]
            found += tools
        return found, {name: error.message for name, error in failures.items()}

    async def _set_up(
        self,
        tenant_id: str,
        tools: list[TypedTool],
        picked: Mapping[str, set[str]],
        selection: Selection,
        categories: Mapping[str, CategoryState],
    ) -> list[TypedTool]:
        """MCP tools with the tenant's stored settings (`with_settings`); for a run that is no
        admin's, those disabled, or of a disabled category, are left out (a picked one is then
        unavailable, as a disabled stored tool is)."""
        if not tools or self._mcp_settings is None:
            return tools
        stored = {doc["tool_id"]: doc for doc in await self._mcp_settings.all(tenant_id=tenant_id)}
        if not stored:
            return tools
        offered: list[TypedTool] = []
        for tool in tools:
            if isinstance(tool, McpServerTool):
                tool = with_settings(tool, stored.get(tool.tool_id))
            if selection.admin or (tool.enabled and category_on(tool.category, categories)):
                offered.append(tool)
        left_out = {t.tool_id for t in tools} - {t.tool_id for t in offered}
        missing = sorted(left_out & set().union(*picked.values())) if picked else []
        if missing:
            raise UnavailableToolsError.of(missing)
        return offered

    async def mcp_tool(self, tenant_id: str, tool_id: str) -> McpServerTool:
        """An MCP server's tool as its server lists it now (no stored settings applied): 404
        for a server the tenant cannot use, or one that lists no such tool."""
        server_name = server_of(tool_id)
        usable = {s.name: s for s in await self._mcp.usable(tenant_id=tenant_id)}
        if server_name is None or server_name not in usable:
            raise NotFoundError(f"tool '{tool_id}' does not exist (no MCP server '{server_name}')")
        server = usable[server_name]
        listed = await self._hub.server_tools(server, {}, tenant_id=tenant_id)
        for tool in await self._hub.typed_tools(server, listed):  # off the event loop, kept
            if tool.tool_id == tool_id:
                return tool
        raise NotFoundError(f"MCP server '{server_name}' lists no tool '{tool_id}'")

    async def _check_served_names(
        self,
        tenant_id: str,
        stored: list[TypedTool],
        context: Mapping[str, Any],
        token: ClientToken | None,
    ) -> None:
        """A stored tool called by a name that one of the tenant's MCP servers also offers
        (`{server}__{tool}`) is the clash a listing refuses: refused here too. Only names of
        that shape cost a look at the server (its cached list); an unreachable one is no clash."""
        shaped = [(tool, name) for tool in stored if (name := server_of(tool.name)) is not None]
        if not shaped:
            return
        usable = {s.name: s for s in await self._mcp.usable(tenant_id=tenant_id)}
        for tool, server_name in shaped:
            if server_name not in usable:
                continue
            reachable, _ = await self._hub.reachable_tools(
                [usable[server_name]], dict(context), tenant_id=tenant_id
            )
            for server, listed in reachable:
                offered = await self._hub.typed_tools(server, listed)
                if any(
                    t.name == tool.name and (token is None or token.selects(t)) for t in offered
                ):
                    raise NameClashError(tool.name)

    async def _toolset(
        self,
        tenant_id: str,
        tools: list[TypedTool],
        context: dict[str, Any],
        servers: list[McpServer],
        skipped: dict[str, str],
        deferred: DeferredTools | None = None,
    ) -> Toolset:
        needed = set().union(*(tool.secrets for tool in tools))
        secrets = await self._secrets.resolve(needed, tenant_id=tenant_id) if needed else {}
        http = (
            await self._outbound.http_client(tenant_id)
            if any(tool.uses_http for tool in tools) or deferred is not None
            else None
        )
        sessions = (
            McpSessions(self._hub, {s.name: s for s in servers}, context, tenant_id=tenant_id)
            if servers
            else None
        )
        hidden = hidden_values(context, secrets, servers, tools)
        scope = CallScope(
            context=context,
            secrets=secrets,
            mcp=sessions,
            scrub=Scrubber(hidden) if hidden else NOTHING_HIDDEN,
            http=http,
        )
        reveal = partial(self._revealed, tenant_id, servers) if deferred is not None else None
        return Toolset(
            tools,
            scope,
            skipped_servers=skipped,
            sessions=sessions,
            deferred=deferred,
            reveal=reveal,
        )

    async def _revealed(
        self, tenant_id: str, servers: list[McpServer], tools: list[TypedTool], scope: CallScope
    ) -> CallScope:
        """The run's scope once `tools` join it: their secrets resolved, every hidden value of
        the run (theirs too) redacted."""
        needed = set().union(*(tool.secrets for tool in tools)) - set(scope.secrets)
        found = await self._secrets.resolve(needed, tenant_id=tenant_id) if needed else {}
        secrets = {**scope.secrets, **found}
        scrub = scope.scrub.joined(hidden_values({}, found, (), tools))
        return replace(scope, secrets=secrets, scrub=scrub)


@dataclass(frozen=True, slots=True)
class _Pool:
    """What a caller is offered of a snapshot: every usable stored tool, and those offered at
    once when the rest are found by search (the `default` category's)."""

    tools: tuple[TypedTool, ...]
    always_on: tuple[TypedTool, ...]


@dataclass(frozen=True, slots=True)
class _ByName:
    """A caller's stored tools ordered by name (pages of `tools/list`)."""

    tools: tuple[TypedTool, ...]
    names: tuple[str, ...]
    index: frozenset[str]


def may_use(
    tool: TypedTool,
    categories: Mapping[str, CategoryState],
    token: ClientToken | None,
    *,
    admin: bool = False,
) -> bool:
    """The one rule of what a caller may use of the stored tools: an enabled tool of an
    enabled category (any readable one for an admin's invoke), within its token's selection."""
    offered = admin or (tool.enabled and category_on(tool.category, categories))
    return offered and (token is None or token.selects(tool))


def _usable_stored(snapshot: ToolSnapshot, token: ClientToken | None) -> list[TypedTool]:
    """The stored tools a caller may use (what `_stored_tools` offers without a selection)."""
    categories = snapshot.categories
    return [e.tool for e in snapshot.entries if e.tool and may_use(e.tool, categories, token)]


def _by_name(tools: Sequence[TypedTool]) -> _ByName:
    ordered = tuple(sorted(tools, key=lambda tool: tool.name))
    names = tuple(tool.name for tool in ordered)
    return _ByName(ordered, names, frozenset(names))


def _pool(
    snapshot: ToolSnapshot, usable: Callable[[TypedTool], bool], tags: Sequence[str] | None
) -> _Pool:
    tools = tuple(_tagged([e.tool for e in snapshot.entries if e.tool and usable(e.tool)], tags))
    return _Pool(tools, tuple(tool for tool in tools if tool.category == DEFAULT_CATEGORY))


def category_on(name: str, categories: Mapping[str, CategoryState]) -> bool:
    """Chats offer a category's tools while it is enabled; `default` is always on, and a
    category the tenant does not have (deleted meanwhile, written by hand) is off."""
    if name == DEFAULT_CATEGORY:
        return True
    state = categories.get(name)
    return state is not None and state.enabled


def usage_hints(tools: Sequence[TypedTool], categories: Mapping[str, CategoryState]) -> UsageHints:
    """The one instruction block of the categories in play: a `## {name} tools` section for
    each category of `tools` with usage hints, `default` first, then by name."""
    names = sorted({tool.category for tool in tools}, key=lambda n: (n != DEFAULT_CATEGORY, n))
    sections = [
        (name, hints)
        for name in names
        if (state := categories.get(name)) is not None and (hints := state.usage_hints.strip())
    ]
    if not sections:
        return UsageHints([], None)
    content = "\n\n".join(f"## {name} tools\n{hints}" for name, hints in sections)
    return UsageHints([name for name, _ in sections], content)


def _check_names(tools: list[TypedTool]) -> None:
    """The one name-clash rule: a name offered twice is refused."""
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise NameClashError(tool.name)
        seen.add(tool.name)


def _refuse_unreadable(missing: list[str], entries: Mapping[str, CatalogEntry]) -> None:
    """409 naming the problems of a requested stored tool this server cannot read."""
    for tool_id in missing:
        entry = entries.get(tool_id)
        if entry is not None and entry.tool is None:
            raise ConflictError(
                f"tool '{tool_id}' is stored in a form this server cannot read "
                f"({'; '.join(entry.problems)}); replace it (PUT) or delete it"
            )


def _tagged(tools: list[TypedTool], tags: Sequence[str] | None) -> list[TypedTool]:
    if tags is None:
        return tools
    wanted = set(tags)
    return [tool for tool in tools if not wanted.isdisjoint(tool.tags)]


def _name(tool: TypedTool) -> str:
    return tool.name


def _tool_id(tool: TypedTool) -> str:
    return tool.tool_id
