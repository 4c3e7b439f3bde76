"""Tool CRUD for one tenant, with every rule a definition must follow."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson

from app.errors import ConflictError, NotFoundError, UnprocessableError, field_error
from app.http.netguard import OutboundPolicy
from app.limits.local import Fence, local_fence
from app.repositories.categories import CategoryRepository
from app.repositories.tools import ToolRepository
from app.schemas.categories import DEFAULT_CATEGORY
from app.schemas.fields import Provider
from app.schemas.tools import McpToolSettings, Tool, ToolCreate, ToolFields, ToolUpdate
from app.services.catalog import (
    CatalogEntry,
    ToolCatalog,
    ToolSnapshot,
    shown_tool,
    tools_stamp,
)
from app.services.changes import Publish, unpublished
from app.services.outbound import TenantOutbound
from app.tools.registry import FunctionRegistry
from app.tools.rules import (
    Problem,
    WriteBounds,
    bound_problems,
    signature_problems,
    write_problems,
)
from app.tools.typed import ExternalTool, FunctionTool, parse_stored_tool


class ToolService:
    def __init__(
        self,
        *,
        tools: ToolRepository,
        registry: FunctionRegistry,
        outbound: TenantOutbound,
        catalog: ToolCatalog,
        categories: CategoryRepository | None = None,
        max_tools: int = 500,
        max_schema_bytes: int = 32_768,
        max_timeout_s: float = 30.0,
        max_output_chars: int = 16_000,
        fence: Fence | None = None,
        publish: Publish = unpublished,
    ) -> None:
        self._tools = tools
        self._registry = registry
        self._outbound = outbound
        self._catalog = catalog
        self._categories = categories
        self._max_tools = max_tools
        self._max_schema_bytes = max_schema_bytes
        self._max_timeout_s = max_timeout_s
        self._max_output_chars = max_output_chars
        self._fence = fence or local_fence()
        self._publish = publish

    async def check(self, tool: ToolFields, *, tenant_id: str) -> None:
        """Raise a 422 listing every rule `tool` breaks, each with its JSON path."""
        problems = self.problems(tool, await self._outbound.policy(tenant_id))
        problems += await self.category_problems(tool.category, tenant_id=tenant_id)
        if problems:
            raise UnprocessableError(
                "The tool definition is invalid.",
                errors=[field_error(path, message) for path, message in problems],
            )

    @property
    def max_schema_bytes(self) -> int:
        """What a tool's definition may weigh as JSON (MAX_TOOL_SCHEMA_BYTES)."""
        return self._max_schema_bytes

    @property
    def write_bounds(self) -> WriteBounds:
        """The operator's bounds on a written tool (its size, timeout and output cap)."""
        return WriteBounds(self._max_schema_bytes, self._max_timeout_s, self._max_output_chars)

    def problems(self, tool: ToolFields, policy: OutboundPolicy) -> list[Problem]:
        """Every rule `tool` breaks, by JSON path: its id (a reserved one), its size, its
        definition and, for a function tool, its server function's signature."""
        problems = write_problems(tool, policy, self.write_bounds)
        if problems and problems[0][0] in ("$.tool_id", "$.function"):
            return problems  # reserved, or too large to judge further
        if tool.type == "function":
            entry = self._registry.get(tool.function.name)
            if entry is None:
                available = ", ".join(sorted(e.name for e in self._registry)) or "none"
                problems.append(
                    (
                        "$.function.name",
                        f"no server function is called "
                        f"'{tool.function.name}' (available: {available})",
                    )
                )
            else:
                problems += signature_problems(entry.func, tool.function, tool.context_parameters)
        return problems

    async def category_problems(self, name: str, *, tenant_id: str) -> list[Problem]:
        """A tool names a category the tenant has (one query; `default` always exists)."""
        if name == DEFAULT_CATEGORY or self._categories is None:
            return []
        if await self._categories.exists(name, tenant_id=tenant_id):
            return []
        return [("$.category", f"the tenant has no category '{name}' (POST /categories)")]

    def bound_problems(self, tool: ToolFields | McpToolSettings) -> list[Problem]:
        """A tool's own bounds stay under the operator's (TOOL_TIMEOUT_S,
        TOOL_OUTPUT_MAX_CHARS); an MCP tool's settings' too."""
        return bound_problems(tool, self.write_bounds)

    async def create(self, tool: ToolCreate, *, tenant_id: str) -> Tool:
        """Store a new tool; 422 on a broken definition, 409 on a taken id or function name."""
        await self.check(tool, tenant_id=tenant_id)
        async with self._fence(tenant_id, "tools"):  # the cap holds exactly
            if await self._tools.count(tenant_id=tenant_id) >= self._max_tools:
                raise ConflictError(
                    f"the tenant already has {self._max_tools} tools (MAX_TOOLS_PER_TENANT); "
                    "delete one first"
                )
            try:
                doc = await self._tools.insert(_document(tool), tenant_id=tenant_id)
            finally:
                self._catalog.mark_stale(tenant_id)
        await self._publish(
            tools_stamp(tenant_id)
        )  # only once stored: a failed write never waits on it
        return _shown(doc)

    async def taken(self, *, tenant_id: str) -> tuple[set[str], set[str]]:
        """The tenant's tool ids and function names (new tools may use neither)."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        docs = await self._tools.all(tenant_id=tenant_id) if snapshot.unreadable else []
        ids = set(snapshot.by_id)
        names = {e.tool.name for e in snapshot.by_id.values() if e.tool is not None}
        names |= {d["function"]["name"] for d in docs if isinstance(d.get("function"), dict)}
        return ids, names

    async def room(self, *, tenant_id: str) -> int:
        """How many more tools the tenant may have (MAX_TOOLS_PER_TENANT)."""
        return self._max_tools - await self._tools.count(tenant_id=tenant_id)

    async def create_all(self, tools: list[ToolCreate], *, tenant_id: str) -> list[Tool]:
        """Store checked tools together: all of them, or (on a failure, a cap) none."""
        async with self._fence(tenant_id, "tools"):  # the cap holds exactly
            count = await self._tools.count(tenant_id=tenant_id)
            if count + len(tools) > self._max_tools:
                raise ConflictError(
                    f"{len(tools)} more tools would pass the tenant's limit of {self._max_tools} "
                    f"(MAX_TOOLS_PER_TENANT; it has {count}); nothing was stored"
                )
            stored: list[Tool] = []
            try:
                for tool in tools:
                    stored.append(
                        _shown(await self._tools.insert(_document(tool), tenant_id=tenant_id))
                    )
                    # The embedded store answers without yielding and checks unique keys by
                    # scanning (0.86 s on the loop for a 364-tool import): the loop turns here.
                    await asyncio.sleep(0)
            except BaseException:
                for done in stored:  # all or nothing
                    await self._tools.delete(done.tool_id, tenant_id=tenant_id)
                raise
            finally:
                self._catalog.mark_stale(tenant_id)
        await self._publish(tools_stamp(tenant_id))
        return stored

    async def has(self, tool_id: str, *, tenant_id: str) -> bool:
        """Whether the tenant has a stored tool of this id (readable or not)."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        return tool_id in snapshot.by_id

    async def refuse_stored(self, tool_id: str, *, tenant_id: str) -> None:
        """409 when a stored tool has this id: an MCP tool's settings cannot take it."""
        if await self.has(tool_id, tenant_id=tenant_id):
            raise ConflictError(
                f"a stored tool has the id '{tool_id}': replace it with a tool definition"
            )

    async def entry(self, tool_id: str, *, tenant_id: str) -> CatalogEntry:
        """One stored tool, readable or not; 404 if the tenant has none with this id."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        found = snapshot.by_id.get(tool_id)
        if found is None:
            raise NotFoundError(f"tool '{tool_id}' does not exist")
        return found

    async def get_json(
        self, tool_id: str, *, tenant_id: str, provider: Provider | None = None
    ) -> bytes:
        """One tool as API JSON, or in a provider's tool format."""
        entry = await self.entry(tool_id, tenant_id=tenant_id)
        if provider is None:
            return entry.json
        tool = readable(entry)
        reasons = tool.incompatible_providers.get(provider)
        if provider == "openai-strict" and reasons:  # one tool asked for: say exactly why not
            raise UnprocessableError(
                "The tool cannot be given in OpenAI's strict mode.",
                errors=[field_error("$.function.parameters", reason) for reason in reasons],
            )
        return orjson.dumps(tool.in_format(provider))

    async def page_json(
        self,
        *,
        tenant_id: str,
        limit: int,
        offset: int,
        tool_type: str | None,
        tag: str | None,
        provider: Provider | None = None,
        category: str | None = None,
    ) -> bytes:
        """A page of tools as API JSON (a ToolPage), or a provider's `tools` list (which leaves
        out stored tools that cannot be read). The entries a filter keeps are derived once per
        snapshot: a page costs its own size, not the catalog's."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        entries = _filtered(snapshot, tool_type, tag, category)
        page = entries[offset : offset + limit]
        if provider is not None:
            return orjson.dumps([e.tool.in_format(provider) for e in page if e.tool is not None])
        items = b",".join(entry.json for entry in page)
        return b'{"items":[%b],"total":%d,"limit":%d,"offset":%d}' % (
            items,
            len(entries),
            limit,
            offset,
        )

    async def ids_json(
        self, *, tenant_id: str, limit: int, offset: int, category: str | None = None
    ) -> tuple[bytes, int]:
        """A page of the tenant's tool ids (a JSON list of ToolId) and how many there are in
        all; each entry's JSON is built once per snapshot."""
        snapshot = await self._catalog.snapshot(tenant_id=tenant_id)
        entries = _filtered(snapshot, None, None, category)
        view = ("ids-json", category)
        shown = snapshot.view(view, lambda: tuple(_id_json(entry) for entry in entries))
        return b"[%b]" % b",".join(shown[offset : offset + limit]), len(shown)

    async def replace(self, tool_id: str, tool: ToolUpdate, *, tenant_id: str) -> Tool:
        """Replace a tool whole; its tool_id cannot change."""
        if tool.tool_id is not None and tool.tool_id != tool_id:
            raise UnprocessableError(
                "The tool_id of a tool cannot change.",
                errors=[
                    field_error(
                        "$.tool_id", f"must be '{tool_id}' (the id in the path) or left out"
                    )
                ],
            )
        await self.check(tool, tenant_id=tenant_id)
        try:
            doc = await self._tools.replace(tool_id, _document(tool), tenant_id=tenant_id)
        finally:
            self._catalog.mark_stale(tenant_id)
        if doc is None:
            raise NotFoundError(f"tool '{tool_id}' does not exist")
        await self._publish(tools_stamp(tenant_id))
        return _shown(doc)

    async def delete(self, tool_id: str, *, tenant_id: str) -> None:
        deleted = await self._tools.delete(tool_id, tenant_id=tenant_id)
        self._catalog.mark_stale(tenant_id)
        if not deleted:
            raise NotFoundError(f"tool '{tool_id}' does not exist")
        await self._publish(tools_stamp(tenant_id))


def _filtered(
    snapshot: ToolSnapshot, tool_type: str | None, tag: str | None, category: str | None
) -> Sequence[CatalogEntry]:
    """The snapshot's entries a listing's filters keep, in tool_id order (derived once)."""
    if tool_type is None and tag is None and category is None:
        return snapshot.entries

    def kept() -> tuple[CatalogEntry, ...]:
        return tuple(
            entry
            for entry in snapshot.entries
            if (tool_type is None or entry.stored_type == tool_type)
            and (tag is None or (entry.tool is not None and tag in entry.tool.tags))
            and (category is None or entry.category == category)
        )

    return snapshot.view(("listed", tool_type, tag, category), kept)


def _id_json(entry: CatalogEntry) -> bytes:
    shown = {
        "tool_id": entry.tool_id,
        "name": entry.name,
        "type": entry.tool.kind if entry.tool else None,
        "enabled": entry.enabled,
        "problems": list(entry.problems) or None,
    }
    return orjson.dumps({key: value for key, value in shown.items() if value is not None})


def readable(entry: CatalogEntry) -> FunctionTool | ExternalTool:
    """The entry's typed tool; 409 naming the problems when the stored document is unreadable."""
    if entry.tool is None:
        raise ConflictError(
            f"tool '{entry.tool_id}' is stored in a form this server cannot read "
            f"({'; '.join(entry.problems)}); replace it (PUT) or delete it"
        )
    return entry.tool


def _shown(doc: dict[str, Any]) -> Tool:
    """A tool just written (and validated on the way in), as the create and replace routes
    answer."""
    return shown_tool(*parse_stored_tool(doc))


def _document(tool: ToolFields) -> dict[str, Any]:
    return tool.model_dump(
        exclude_none=True, exclude={"tool_id"} if tool.__class__ is ToolUpdate else None
    )
