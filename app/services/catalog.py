"""Each tenant's tools, loaded once and kept ready: parsed into typed tools, API JSON built once;
with them, the tenant's categories (which of them are enabled decides which tools chats get).

Loading a tenant's tools, validating them and building their schemas on every request was the
largest cost after the model call (profile in the performance issue). A snapshot is reused for
`ttl_s` (TOOL_CACHE_TTL_S; 0 turns caching off) and refreshed in the background before then
(app/cache.py). Writes through this process mark the tenant's snapshot stale at once (read again
next time; served only if that read fails); another replica's writes within the sync interval.

A stored document that does not parse never breaks the tenant's other tools: it is left out of
chats (one warning per process), and the CRUD routes list it with its `problems`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, get_args

from app.cache import LoadingCache
from app.repositories.categories import CategoryRepository
from app.repositories.tools import ToolRepository
from app.schemas.tools import ApprovalMode, StoredTool, Tool, UnreadableTool
from app.tools.registry import FunctionRegistry
from app.tools.typed import (
    DefaultsOf,
    ExternalTool,
    FunctionTool,
    UnreadableToolError,
    parse_stored_tool,
)

logger = logging.getLogger(__name__)
MAX_WARNED = 10_000
# Past this many stored tools a snapshot is built off the event loop (each tool's validator is
# compiled: 364 imported tools held the loop 0.9 s).
OFF_LOOP_TOOLS = 32
MAX_CACHED_TENANTS = 100_000


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One stored tool: typed, or the reasons it cannot be (`tool` is None then)."""

    tool_id: str
    tool: FunctionTool | ExternalTool | None
    json: bytes  # as the CRUD routes show it
    problems: tuple[str, ...] = ()
    stored_type: Any = None  # the document's `type`, whatever it holds
    enabled: bool = False

    @property
    def name(self) -> str | None:
        return self.tool.name if self.tool else None


@dataclass(frozen=True, slots=True)
class CategoryState:
    """One stored category, as chats and the category routes read it."""

    name: str
    description: str = ""
    enabled: bool = False
    usage_hints: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    approval: ApprovalMode | None = None  # its tools' approval, where they set none

    @classmethod
    def of(cls, doc: dict[str, Any]) -> CategoryState | None:
        """The stored document's state; None for one this version cannot read."""
        name, description = doc.get("name"), doc.get("description", "")
        enabled, hints = doc.get("enabled"), doc.get("usage_hints", "")
        if not (isinstance(name, str) and isinstance(description, str)):
            return None
        if not (isinstance(enabled, bool) and isinstance(hints, str)):
            return None
        made, changed = doc.get("created_at"), doc.get("updated_at")
        approval = doc.get("approval")
        return cls(
            name,
            description,
            enabled,
            hints,
            made if isinstance(made, datetime) else None,
            changed if isinstance(changed, datetime) else None,
            _approval(approval),
        )


def _approval(value: Any) -> ApprovalMode | None:
    """A stored category's approval; one this version cannot read waits for a person (the safe
    reading), rather than letting its tools run unasked."""
    if value is None:
        return None
    for mode in get_args(ApprovalMode):
        if value == mode:
            return mode  # type: ignore[no-any-return]
    return "always"


@dataclass(frozen=True)
class ToolSnapshot:
    """One tenant's tools, ordered by tool_id, and its categories by name."""

    entries: list[CatalogEntry]
    by_id: dict[str, CatalogEntry]
    enabled: list[FunctionTool | ExternalTool]
    categories: dict[str, CategoryState] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        docs: list[dict[str, Any]],
        *,
        defaults_of: DefaultsOf | None = None,
        category_docs: list[dict[str, Any]] | None = None,
        unavailable: Callable[[str], bool] | None = None,
    ) -> ToolSnapshot:
        entries = [entry for doc in docs if (entry := catalog_entry(doc, defaults_of, unavailable))]
        states = [CategoryState.of(doc) for doc in category_docs or []]
        return cls(
            entries=entries,
            by_id={entry.tool_id: entry for entry in entries},
            enabled=[e.tool for e in entries if e.tool is not None and e.tool.enabled],
            categories={state.name: state for state in states if state is not None},
        )

    @cached_property
    def tools_by_id(self) -> dict[str, tuple[FunctionTool | ExternalTool]]:
        """Each readable tool under its id (as `tools_by_name` is keyed, for one lookup path)."""
        return {e.tool_id: (e.tool,) for e in self.entries if e.tool is not None}

    @cached_property
    def tools_by_name(self) -> dict[str, list[FunctionTool | ExternalTool]]:
        """The readable tools by the name the model sees (a call by name looks it up here)."""
        named: dict[str, list[FunctionTool | ExternalTool]] = {}
        for entry in self.entries:
            if entry.tool is not None:
                named.setdefault(entry.tool.name, []).append(entry.tool)
        return named

    @cached_property
    def order(self) -> dict[str, int]:
        """Each tool_id's place in `entries` (chosen tools are listed in it)."""
        return {entry.tool_id: place for place, entry in enumerate(self.entries)}

    @property
    def unreadable(self) -> list[CatalogEntry]:
        return [entry for entry in self.entries if entry.tool is None]


def catalog_entry(
    doc: dict[str, Any],
    defaults_of: DefaultsOf | None,
    unavailable: Callable[[str], bool] | None = None,
) -> CatalogEntry | None:
    """The entry for a stored document; None for one without a usable tool_id (no route could
    reach it)."""
    tool_id = doc.get("tool_id")
    if not isinstance(tool_id, str):
        return None
    try:
        stored, tool = parse_stored_tool(doc, defaults_of=defaults_of, unavailable=unavailable)
    except UnreadableToolError as exc:
        enabled = doc.get("enabled") is True
        stored_type = doc.get("type")
        shown = UnreadableTool(
            tool_id=tool_id,
            type=stored_type if isinstance(stored_type, str) else None,
            enabled=enabled,
            problems=exc.problems,
        )
        return CatalogEntry(
            tool_id,
            None,
            shown.model_dump_json(exclude_none=True).encode(),
            tuple(exc.problems),
            stored_type,
            enabled,
        )
    json = shown_tool(stored, tool).model_dump_json(exclude_none=True).encode()
    return CatalogEntry(tool_id, tool, json, (), stored.type, stored.enabled)


def shown_tool(stored: StoredTool, tool: FunctionTool | ExternalTool) -> Tool:
    """A stored tool as admins see it, with the providers that cannot express it."""
    return Tool.model_validate(
        {**stored.model_dump(), "incompatible_providers": tool.incompatible_providers or None}
    )


def tools_stamp(tenant_id: str) -> str:
    """The change stamp (app/services/changes.py) that says only the tenant's tools changed:
    other replicas mark their snapshot stale instead of forgetting everything of the tenant
    (tenant ids never hold a `/`)."""
    return f"{tenant_id}{TOOLS_STAMP}"


TOOLS_STAMP = "/tools"


class ToolCatalog:
    def __init__(
        self,
        *,
        tools: ToolRepository,
        ttl_s: float,
        registry: FunctionRegistry | None = None,
        categories: CategoryRepository | None = None,
        stale_if_error_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        capabilities: frozenset[str] | None = None,
    ) -> None:
        self._tools = tools
        self._registry = registry
        self._categories = categories
        self._capabilities = capabilities  # None: every capability a function may require
        self._snapshots: LoadingCache[str, ToolSnapshot] = LoadingCache(
            self._read,
            ttl_s=ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED_TENANTS,
            name="tool catalog",
            clock=clock,
        )
        self._warned: set[tuple[str, str, tuple[str, ...]]] = set()

    def _defaults_of(self, name: str) -> frozenset[str]:
        entry = self._registry.get(name) if self._registry is not None else None
        return frozenset() if entry is None else entry.defaulted_parameters

    def _unavailable(self, name: str) -> bool:
        """A function needing a capability the server lacks: its tool is never offered."""
        entry = self._registry.get(name) if self._registry is not None else None
        if entry is None or entry.requires is None or self._capabilities is None:
            return False
        return entry.requires not in self._capabilities

    async def snapshot(self, *, tenant_id: str) -> ToolSnapshot:
        return await self._snapshots.get(tenant_id)

    async def _read(self, tenant_id: str) -> ToolSnapshot:
        docs = await self._tools.all(tenant_id=tenant_id)
        categories = await self._categories.all(tenant_id=tenant_id) if self._categories else None
        build = functools.partial(
            ToolSnapshot.build,
            docs,
            defaults_of=self._defaults_of,
            category_docs=categories,
            unavailable=self._unavailable,
        )
        snapshot = await asyncio.to_thread(build) if len(docs) > OFF_LOOP_TOOLS else build()
        self._warn_unreadable(snapshot, tenant_id)
        return snapshot

    def _warn_unreadable(self, snapshot: ToolSnapshot, tenant_id: str) -> None:
        """One warning per process for each unreadable document (and each new set of reasons)."""
        for entry in snapshot.unreadable:
            key = (tenant_id, entry.tool_id, entry.problems)
            if key in self._warned:
                continue
            if len(self._warned) >= MAX_WARNED:
                self._warned.clear()
            self._warned.add(key)
            logger.warning(
                "tenant %s: stored tool %r cannot be read and is left out of chats: %s",
                tenant_id,
                entry.tool_id,
                "; ".join(entry.problems),
            )

    async def enabled(self, *, tenant_id: str) -> list[FunctionTool | ExternalTool]:
        """The tenant's enabled, readable tools, ordered by tool_id."""
        return (await self.snapshot(tenant_id=tenant_id)).enabled

    def invalidate(self, tenant_id: str) -> None:
        """Forget the tenant's tools (the tenant was created or deleted)."""
        self._snapshots.invalidate(tenant_id)

    def mark_stale(self, tenant_id: str) -> None:
        """The tenant's tools changed: read them again, but while the database cannot be read
        the last snapshot still serves (CACHE_STALE_IF_ERROR_S)."""
        self._snapshots.mark_stale(tenant_id)

    async def aclose(self) -> None:
        await self._snapshots.aclose()
