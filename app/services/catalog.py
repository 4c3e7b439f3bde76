"""Each tenant's tools, loaded once and kept ready: parsed into typed tools, API JSON built once;
with them, the tenant's categories (which of them are enabled decides which tools chats get).

A snapshot changes only when its tools do (why: docs/performance.md, "Catalog size"):

- **Stamp-driven.** A snapshot is kept until its tenant's tools change: writes through this
  process mark it stale at once (read again next time; served only if that read fails), another
  replica's writes within the sync interval (the change stamps, app/services/changes.py). Only
  while the stamps cannot be read does the TTL (TOOL_CACHE_TTL_S; 0 turns caching off) bound
  how stale a snapshot may be (app/kit/cache.py).
- **Incremental.** A refresh re-parses only the documents whose content changed: each entry is
  keyed by the digest of its stored document, the previous snapshot's entries are reused by it,
  and typed tools are shared by digest across tenants (every tenant's seeded tools are one set
  of typed tools and compiled validators).
- **Bounded.** Snapshots unused for TOOL_CACHE_IDLE_S are dropped one by one, and past
  TOOL_CACHE_MAX_TENANTS the least recently used one is (never all at once).
- **O(1) per call.** Lookups by id and by name are dicts; what a chat is offered (enabled tools
  of enabled categories, per caller filter) is derived once per snapshot (`derived`), and the
  search index once per snapshot (`app/services/tool_search.py`).

A stored document that does not parse never breaks the tenant's other tools: it is left out of
chats (one warning per process), and the CRUD routes list it with its `problems`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, TypeVar, get_args

import orjson

from app.kit.cache import Coherence, LoadingCache
from app.repositories.categories import CategoryRepository
from app.repositories.tools import ToolRepository
from app.schemas.tools import ApprovalMode, StoredTool, Tool, UnreadableTool
from app.services.tool_search import ToolIndex
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
# Past this many documents to parse a snapshot is built off the event loop (each tool's
# validator is compiled: 364 imported tools held the loop 0.9 s).
OFF_LOOP_TOOLS = 32
DEFAULT_MAX_TENANTS = 10_000
# Typed tools kept by the digest of their definition, across tenants and refreshes.
MAX_PARSED = 20_000
# Derived views kept per snapshot (one per distinct caller filter: admin, token, tags).
MAX_DERIVED = 64
MAX_INDEXES = 256  # tenants whose last search index is kept for reuse
SEARCH_INDEX = "search-index"
T = TypeVar("T")
Typed = FunctionTool | ExternalTool


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One stored tool: typed, or the reasons it cannot be (`tool` is None then)."""

    tool_id: str
    tool: FunctionTool | ExternalTool | None
    json: bytes  # as the CRUD routes show it
    problems: tuple[str, ...] = ()
    stored_type: Any = None  # the document's `type`, whatever it holds
    enabled: bool = False
    # The stored document's digest (None: not digestible, parsed at every refresh).
    revision: bytes | None = None
    category: Any = None  # the document's `category`, whatever it holds

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


@dataclass(frozen=True, slots=True)
class _Parsed:
    """What a stored definition (timestamps aside) parses to, whichever tenant stores it."""

    tool: Typed | None
    shown: Tool | None  # the admin view, timestamps to be set per document
    unreadable: bytes = b""  # the admin view of an unreadable one (no timestamps in it)
    problems: tuple[str, ...] = ()


class ParsedTools:
    """Typed tools by the digest of their definition: shared by every tenant whose document is
    the same (the seeded tools) and kept across refreshes, the least recently used dropped past
    `max_entries`. A typed tool is immutable, so one instance serves every tenant."""

    def __init__(
        self,
        defaults_of: DefaultsOf | None = None,
        unavailable: Callable[[str], bool] | None = None,
        max_entries: int = MAX_PARSED,
    ) -> None:
        self._defaults_of = defaults_of
        self._unavailable = unavailable
        self._max = max_entries
        self._parsed: OrderedDict[bytes, _Parsed] = OrderedDict()
        self._lock = threading.Lock()
        self.parses = 0  # documents parsed (the rest were found by digest)

    def entry(
        self, doc: dict[str, Any], previous: CatalogEntry | None = None
    ) -> CatalogEntry | None:
        """The entry for a stored document (`previous`: this tool's entry in the snapshot being
        replaced, reused when the document did not change); None for one without a usable
        tool_id (no route could reach it)."""
        tool_id = doc.get("tool_id")
        if not isinstance(tool_id, str):
            return None
        digest = _digest(doc)
        if digest is not None and previous is not None and previous.revision == digest[1]:
            return previous
        if digest is None:  # not digestible: parsed as it is, every time
            return self._entry(tool_id, doc, self._parse(doc), None)
        definition, revision = digest
        with self._lock:  # snapshots are built on worker threads too
            parsed = self._parsed.get(definition)
            if parsed is not None:
                self._parsed.move_to_end(definition)
        if parsed is None:
            parsed = self._parse(doc)
            with self._lock:
                self._parsed[definition] = parsed
                while len(self._parsed) > self._max:
                    self._parsed.popitem(last=False)
        return self._entry(tool_id, doc, parsed, revision)

    def _parse(self, doc: dict[str, Any]) -> _Parsed:
        self.parses += 1
        try:
            stored, tool = parse_stored_tool(
                doc, defaults_of=self._defaults_of, unavailable=self._unavailable
            )
        except UnreadableToolError as exc:
            stored_type = doc.get("type")
            shown = UnreadableTool(
                tool_id=str(doc.get("tool_id")),
                type=stored_type if isinstance(stored_type, str) else None,
                enabled=doc.get("enabled") is True,
                problems=exc.problems,
            )
            unreadable = shown.model_dump_json(exclude_none=True).encode()
            return _Parsed(None, None, unreadable, tuple(exc.problems))
        return _Parsed(tool, shown_tool(stored, tool))

    @staticmethod
    def _entry(
        tool_id: str, doc: dict[str, Any], parsed: _Parsed, revision: bytes | None
    ) -> CatalogEntry:
        stored_type, category = doc.get("type"), doc.get("category", "default")
        if parsed.tool is None or parsed.shown is None:
            enabled = doc.get("enabled") is True
            return CatalogEntry(
                tool_id,
                None,
                parsed.unreadable,
                parsed.problems,
                stored_type,
                enabled,
                revision,
                category,
            )
        shown = parsed.shown
        if revision is not None:  # shared by definition: this document's own timestamps
            stamps = {"created_at": doc["created_at"], "updated_at": doc["updated_at"]}
            shown = shown.model_copy(update=stamps)
        json = shown.model_dump_json(exclude_none=True).encode()
        enabled = doc.get("enabled") is True
        return CatalogEntry(
            tool_id, parsed.tool, json, (), stored_type, enabled, revision, category
        )


def _digest(doc: dict[str, Any]) -> tuple[bytes, bytes] | None:
    """(the digest of the definition without its timestamps, the digest of the whole stored
    document), or None for a document that cannot be digested or whose timestamps are not
    datetimes (it is parsed as it is: its problems are its own)."""
    made, changed = doc.get("created_at"), doc.get("updated_at")
    if not (isinstance(made, datetime) and isinstance(changed, datetime)):
        return None
    definition = {k: v for k, v in doc.items() if k != "created_at" and k != "updated_at"}
    try:
        text = orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return None
    head = hashlib.blake2b(text, digest_size=16).digest()
    stamps = f"{made.isoformat()}|{changed.isoformat()}".encode()
    return head, hashlib.blake2b(head + stamps, digest_size=16).digest()


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
    # Views derived from the snapshot (what a caller is offered, the search index), built once.
    derived: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        docs: list[dict[str, Any]],
        *,
        defaults_of: DefaultsOf | None = None,
        category_docs: list[dict[str, Any]] | None = None,
        unavailable: Callable[[str], bool] | None = None,
        parsed: ParsedTools | None = None,
        previous: ToolSnapshot | None = None,
    ) -> ToolSnapshot:
        """`previous`: the snapshot this one replaces (entries whose documents did not change
        are reused); `parsed`: typed tools by definition (shared across tenants)."""
        parser = parsed or ParsedTools(defaults_of, unavailable)
        before = previous.by_id if previous is not None else {}
        entries = [
            entry
            for doc in docs
            if (entry := parser.entry(doc, before.get(str(doc.get("tool_id")))))
        ]
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

    def view(self, key: Hashable, build: Callable[[], T]) -> T:
        """A view of this snapshot derived once per `key` (a few kept; the snapshot is replaced
        when its tools change, and its views with it)."""
        found = self.derived.get(key)
        if found is None:
            if len(self.derived) >= MAX_DERIVED:
                self.derived.clear()
            found = self.derived[key] = build()
        return found


def catalog_entry(
    doc: dict[str, Any],
    defaults_of: DefaultsOf | None,
    unavailable: Callable[[str], bool] | None = None,
) -> CatalogEntry | None:
    """The entry for a stored document; None for one without a usable tool_id (no route could
    reach it)."""
    return ParsedTools(defaults_of, unavailable).entry(doc)


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


def always(read_at: float) -> bool:
    """The coherence of a single process's store: every change is made here."""
    return True


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
        coherent: Coherence | None = None,
        idle_s: float = 0.0,
        max_tenants: int = DEFAULT_MAX_TENANTS,
    ) -> None:
        """`coherent`: whether a change after a read reaches `mark_stale` (the change feed's
        `covers`; `always` for a one-process store); None: the TTL alone."""
        self._tools = tools
        self._registry = registry
        self._categories = categories
        self._capabilities = capabilities  # None: every capability a function may require
        self.parsed = ParsedTools(self._defaults_of, self._unavailable)
        self._snapshots: LoadingCache[str, ToolSnapshot] = LoadingCache(
            self._read,
            ttl_s=ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=max_tenants,
            idle_s=idle_s,
            coherent=coherent,
            name="tool catalog",
            clock=clock,
        )
        self._warned: set[tuple[str, str, tuple[str, ...]]] = set()
        # Each tenant's last search index: the next one reuses its tools' words.
        self._indexes: OrderedDict[str, ToolIndex] = OrderedDict()
        self.reads = 0  # snapshots read from the database

    def _defaults_of(self, name: str) -> frozenset[str]:
        entry = self._registry.get(name) if self._registry is not None else None
        return frozenset() if entry is None else entry.defaulted_parameters

    def _unavailable(self, name: str) -> bool:
        """A function needing a capability the server lacks: its tool is never offered."""
        entry = self._registry.get(name) if self._registry is not None else None
        if entry is None or entry.requires is None or self._capabilities is None:
            return False
        return entry.requires not in self._capabilities

    @property
    def cached_tenants(self) -> int:
        return len(self._snapshots)

    @property
    def evicted(self) -> int:
        return self._snapshots.evicted

    async def snapshot(self, *, tenant_id: str) -> ToolSnapshot:
        return await self._snapshots.get(tenant_id)

    async def _read(self, tenant_id: str) -> ToolSnapshot:
        self.reads += 1
        docs = await self._tools.all(tenant_id=tenant_id)
        categories = await self._categories.all(tenant_id=tenant_id) if self._categories else None
        previous = self._snapshots.previous(tenant_id)
        build = functools.partial(
            ToolSnapshot.build,
            docs,
            category_docs=categories,
            parsed=self.parsed,
            previous=previous,
        )
        reused = len(previous.by_id) if previous is not None else 0
        off_loop = len(docs) - reused > OFF_LOOP_TOOLS or len(docs) > OFF_LOOP_TOOLS * 32
        snapshot = await asyncio.to_thread(build) if off_loop else build()
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

    async def search_index(self, snapshot: ToolSnapshot, *, tenant_id: str) -> ToolIndex:
        """The snapshot's search index (app/services/tool_search.py), built once per snapshot,
        off the event loop past OFF_LOOP_TOOLS, reusing the words of the tools the tenant's
        previous index had; concurrent chats share one build."""
        build = snapshot.view(SEARCH_INDEX, lambda: self._build_index(snapshot, tenant_id))
        return await asyncio.shield(build)

    def _build_index(self, snapshot: ToolSnapshot, tenant_id: str) -> asyncio.Future[ToolIndex]:
        tools = [entry.tool for entry in snapshot.entries if entry.tool is not None]
        texts = {name: state.description for name, state in snapshot.categories.items()}
        build = functools.partial(ToolIndex, tools, texts, self._indexes.get(tenant_id))
        if len(tools) > OFF_LOOP_TOOLS:
            future: asyncio.Future[ToolIndex] = asyncio.ensure_future(asyncio.to_thread(build))
        else:
            future = asyncio.get_running_loop().create_future()
            future.set_result(build())

        def built(done: asyncio.Future[ToolIndex]) -> None:
            if done.cancelled() or done.exception() is not None:
                snapshot.derived.pop(SEARCH_INDEX, None)  # the next search builds it again
                return
            self._indexes[tenant_id] = done.result()
            self._indexes.move_to_end(tenant_id)
            while len(self._indexes) > MAX_INDEXES:
                self._indexes.popitem(last=False)

        future.add_done_callback(built)
        return future

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
