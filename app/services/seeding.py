"""Version-stamped reconciliation of tenants: layout, tool placement, indexes, seeded tools.

Start-up no longer touches every tenant (it made ~7 round trips per tenant before the port
opened: 110 s at 10,001 tenants). Each tenant document carries a stamp, `<layout>|<tool
placement>|<dictionary version>`; a tenant whose stamp is not the current one is reconciled:

1. the collections of the layout before shared collections are moved into the shared ones
   (app/repositories/migration.py), or its tools from their former placement (TOOL_COLLECTIONS);
2. its tool collection's index is created (idempotent);
3. each registry tool it was never given is seeded: existing tools are never overwritten (a
   tenant's edits survive) and a tool it deleted is not brought back (`seeded_tools`);
4. the stamp is written.

When: at the tenant's creation; at its first use after a change (the key lookup carries the
stamp: the request waits up to RECONCILE_WAIT_S, never while the database is down); and by a
bounded background sweep (a few tenants at once, each claimed for a while, so replicas starting
together share the work instead of repeating it). Every step is idempotent: replicas, the sweep
and a first use may reconcile one tenant at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import get_args

import orjson

from app.errors import DatabaseError, DatabaseUnavailable
from app.repositories.categories import CategoryRepository
from app.repositories.database import ToolPlacement
from app.repositories.migration import LEGACY_RESOURCES, LayoutMigration, Moved
from app.repositories.tenants import TenantStore
from app.repositories.tools import ToolRepository
from app.schemas.categories import DEFAULT_CATEGORY
from app.tools.registry import FunctionRegistry

logger = logging.getLogger(__name__)

LAYOUT = 2  # shared collections, a tool collection per tenant (1: a collection per resource)
NEWBORN = "new"  # the dictionary version of a tenant being created
RECONCILE_WAIT_S = 5.0  # a first use waits this long for its tenant's reconciliation at most
SWEEP_CONCURRENCY = 4  # tenants reconciled at once by the sweep
CLAIM_S = 120.0  # a tenant claimed by a sweep is left to it this long
SWEEP_EVERY_S = 600.0  # the sweep looks again (tenants created by an older version meanwhile)
SWEEP_RETRY_S = (1.0, 5.0, 30.0)
MAX_KNOWN = 200_000  # tenants remembered as current in this process
PLACEMENTS: tuple[ToolPlacement, ...] = get_args(ToolPlacement)


def dictionary_version(registry: FunctionRegistry) -> str:
    """What the function dictionary seeds, digested: a change reconciles every tenant."""
    seeds = sorted((entry.seed_document() for entry in registry), key=lambda d: d["tool_id"])
    return hashlib.sha256(orjson.dumps(seeds, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def parse_stamp(stamp: str | None) -> tuple[int, ToolPlacement | None, str]:
    """(layout, tool placement, dictionary version) of a stamp; none: the layout before."""
    if not stamp:
        return 1, None, ""
    layout, _, rest = stamp.partition("|")
    placement, _, version = rest.partition("|")
    found = next((p for p in PLACEMENTS if p == placement), None)
    return int(layout) if layout.isdigit() else 1, found, version


class Reconciler:
    def __init__(
        self,
        *,
        registry: FunctionRegistry,
        tenants: TenantStore,
        tools: ToolRepository,
        categories: CategoryRepository | None = None,
        migration: LayoutMigration | None = None,
        placement: ToolPlacement = "one_database",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._registry = registry
        self._tenants = tenants
        self._tools = tools
        self._categories = categories
        self._migration = migration
        self.placement: ToolPlacement = placement
        self.stamp = f"{LAYOUT}|{placement}|{dictionary_version(registry)}"
        # A tenant being created: nothing to migrate; whatever an earlier tenant of its id left
        # (a delete that crashed half-way) is purged before it is seeded.
        self.new_tenant_stamp = f"{LAYOUT}|{placement}|{NEWBORN}"
        self._purge: Callable[[str], Awaitable[None]] | None = None
        self._sleep = sleep
        self._running: dict[str, asyncio.Task[int]] = {}
        self._known: set[str] = set()  # reconciled here at the current stamp
        self._listeners: list[Callable[[str], Awaitable[None]]] = []
        self._sweep: asyncio.Task[None] | None = None

    def listen(self, reconciled: Callable[[str], Awaitable[None]]) -> None:
        """Call `reconciled(tenant_id)` after a reconciliation that changed the tenant's data
        (records moved, tools seeded): caches to forget."""
        self._listeners.append(reconciled)

    def purge_with(self, purge: Callable[[str], Awaitable[None]]) -> None:
        """How a tenant being created is cleared of an earlier tenant's leftovers."""
        self._purge = purge

    def is_current(self, tenant_id: str, stamp: str | None) -> bool:
        return stamp == self.stamp or tenant_id in self._known

    async def reconcile(self, tenant_id: str, stamp: str | None) -> int:
        """Bring the tenant to the current stamp (one reconciliation per tenant at a time in
        this process; it runs to its end even if the caller stops waiting); how many records
        were moved from another layout."""
        task = self._running.get(tenant_id)
        if task is None:
            task = asyncio.create_task(self._reconcile(tenant_id, stamp), name="reconcile")
            self._running[tenant_id] = task
            task.add_done_callback(lambda _: self._running.pop(tenant_id, None))
        return await asyncio.shield(task)

    async def ensure_current(self, tenant_id: str, stamp: str | None, *, known: bool) -> None:
        """A tenant's first use here: reconcile it if its stamp is not current, waiting at most
        RECONCILE_WAIT_S (it goes on in the background), never failing the request. `known`:
        `stamp` was read with the tenant (else it is read here, once per process)."""
        if self.is_current(tenant_id, stamp):
            return
        try:
            if not known:
                exists, stamp = await self._tenants.stamp_of(tenant_id=tenant_id)
                if not exists or self.is_current(tenant_id, stamp):
                    self._remember(tenant_id)
                    return
            work = asyncio.ensure_future(self.reconcile(tenant_id, stamp))
            done, _ = await asyncio.wait([work], timeout=RECONCILE_WAIT_S)
            if work in done:
                work.result()
            else:
                work.add_done_callback(_retrieved)
        except DatabaseUnavailable:  # served as it is; the sweep or the next use retries
            logger.debug("tenant %s: not reconciled on first use (database away)", tenant_id)
        except DatabaseError as exc:
            logger.warning("tenant %s: not reconciled on first use (%s)", tenant_id, exc)

    async def _reconcile(self, tenant_id: str, stamp: str | None) -> int:
        layout, placement, version = parse_stamp(stamp)
        moved = 0
        if version == NEWBORN and self._purge is not None:
            await self._purge(tenant_id)
        if self._migration is not None:
            if layout < LAYOUT:
                moved = await self._move_legacy(tenant_id)
            elif placement is not None and placement != self.placement:
                moved = _report(
                    tenant_id,
                    await self._migration.move_tools(tenant_id=tenant_id, source=placement),
                )
        await self._tools.ensure_indexes(tenant_id=tenant_id)
        seeded = await self.seed(tenant_id)
        await self._tenants.mark_reconciled(self.stamp, seeded, tenant_id=tenant_id)
        self._remember(tenant_id)
        if moved or seeded:
            for listener in self._listeners:
                await listener(tenant_id)
        return moved

    async def _move_legacy(self, tenant_id: str) -> int:
        assert self._migration is not None
        moved = 0
        for resource in LEGACY_RESOURCES:
            moved += _report(
                tenant_id, await self._migration.move_legacy(resource, tenant_id=tenant_id)
            )
        return moved

    def _remember(self, tenant_id: str) -> None:
        if len(self._known) >= MAX_KNOWN:
            self._known.clear()
        self._known.add(tenant_id)

    def forget(self, tenant_id: str) -> None:
        """The tenant was deleted (or made again): its stamp is read anew."""
        self._known.discard(tenant_id)

    async def seed(self, tenant_id: str) -> list[str]:
        """Give the tenant each registry tool it was never given; the tool ids now seeded."""
        already = await self._tenants.seeded_tool_ids(tenant_id=tenant_id)
        wanted = [entry for entry in self._registry if entry.tool_id not in already]
        await self._seed_categories(tenant_id, {entry.category for entry in wanted})
        seeded: list[str] = []
        for entry in wanted:
            outcome = await self._tools.insert_if_absent(entry.seed_document(), tenant_id=tenant_id)
            if outcome != "conflict":
                seeded.append(entry.tool_id)
            else:
                logger.warning(
                    "tenant %s already has another tool with function name %s; not seeded",
                    tenant_id,
                    entry.name,
                )
        return seeded

    async def _seed_categories(self, tenant_id: str, declared: set[str]) -> None:
        """`default`, and the categories of the function tools being seeded, each created
        enabled if absent: a tenant's edits are kept, and a category it deleted (with its
        tools, which are not seeded again) does not come back."""
        if self._categories is None:
            return
        for name in sorted({DEFAULT_CATEGORY, *declared}):
            document = {"name": name, "description": "", "enabled": True, "usage_hints": ""}
            await self._categories.insert_if_absent(document, tenant_id=tenant_id)

    # The sweep.

    def start(self) -> None:
        self._sweep = asyncio.create_task(self._sweep_forever(), name="reconcile: sweep")

    async def aclose(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            await asyncio.wait([self._sweep], timeout=3.0)

    async def sweep(self) -> int:
        """Reconcile every tenant whose stamp is not current, a few at once; how many."""
        done = 0

        async def worker() -> None:
            nonlocal done
            while claimed := await self._tenants.claim_stale(self.stamp, lease_s=CLAIM_S):
                tenant_id, stamp = claimed
                try:
                    await self.reconcile(tenant_id, stamp)
                    done += 1
                except DatabaseUnavailable:
                    raise
                except DatabaseError as exc:  # this tenant only: the next sweep tries again
                    logger.error("tenant %s: reconciliation failed (%s)", tenant_id, exc)

        async with asyncio.TaskGroup() as group:
            for _ in range(SWEEP_CONCURRENCY):
                group.create_task(worker())
        return done

    async def _sweep_forever(self) -> None:
        failures = 0
        while True:
            delay = await self._sweep_once(failures)
            failures = failures + 1 if delay != SWEEP_EVERY_S else 0
            await self._sleep(delay)

    async def _sweep_once(self, failures: int) -> float:
        """One sweep; how long to wait before the next (longer after each failure)."""
        try:
            count = await self.sweep()
        except Exception as failure:  # a sweep never ends the process
            error = _first(failure)
            delay = SWEEP_RETRY_S[min(failures, len(SWEEP_RETRY_S) - 1)]
            logger.log(
                logging.WARNING if isinstance(error, DatabaseUnavailable) else logging.ERROR,
                "reconciliation sweep interrupted (%s: %s); again in %g s",
                type(error).__name__,
                error.__cause__ or error,
                delay,
                exc_info=None if isinstance(error, DatabaseUnavailable) else error,
            )
            return delay
        if count:
            logger.info("reconciliation sweep: %d tenant(s) brought to %s", count, self.stamp)
        return SWEEP_EVERY_S


def _first(error: BaseException) -> BaseException:
    """The first failure inside a task group's exception group."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _report(tenant_id: str, moved: Moved) -> int:
    if moved.moved:
        logger.info("migration: tenant %s: %d record(s) moved", tenant_id, moved.moved)
    return moved.moved


def _retrieved(task: asyncio.Future[int]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.warning("reconciliation in the background failed (%s)", error)
