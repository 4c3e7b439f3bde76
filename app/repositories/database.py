"""The MongoDB client (real, or the embedded in-memory store) and where each record lives.

Layout (docs/replicas.md, "Collections and namespaces"):
- **Shared collections** hold every record that is not a tool document: `tenants`,
  `client_tokens`, `changes`, `limits`, and `categories`, `runs`, `secrets`, `mcp_servers`,
  `model_providers`, `approvals`, each document naming its tenant, every query index leading
  with `tenant_id` (`scoped`). Their indexes are declared by the repositories and created by one
  background task, retried with backoff, never fatal (`ensure_indexes`).
- **A tool collection per tenant** (`tools`): in this database as `tools.<tenant_id>`, or in a
  database of the tenant's own (TOOL_COLLECTIONS), so that a sharded cluster can place tenants.
  Its `_id` is the tool id; one more index, the unique function name: three namespaces.

Every repository call goes through `Database.call` (the `repository` class decorator): it fails
at once while the outage circuit is open (app/repositories/circuit.py), runs the driver's work
in a task of its own so that a caller that goes away (a client that disconnects, a deadline)
never cancels a driver call halfway (that left PyMongo's topology lock held after a long
outage: a replica wedged for good), and turns driver errors into the project's own
(`DatabaseUnavailable`, `DatabaseError`). Each driver call is bounded by the client's own
operation timeout (`timeoutMS`, MONGODB_TIMEOUT_MS) or a shorter `pymongo.timeout()`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import pymongo
from pymongo import AsyncMongoClient, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import (
    ConnectionFailure,
    ExecutionTimeout,
    NetworkTimeout,
    PyMongoError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
)
from pymongo.monitoring import (
    ServerHeartbeatFailedEvent,
    ServerHeartbeatListener,
    ServerHeartbeatStartedEvent,
    ServerHeartbeatSucceededEvent,
)

from app.config import Settings
from app.errors import DatabaseError, DatabaseUnavailable
from app.repositories.circuit import Circuit

logger = logging.getLogger(__name__)

Document = dict[str, Any]
ToolPlacement = Literal["one_database", "database_per_tenant"]
T = TypeVar("T")
R = TypeVar("R")

MAX_DATABASE_NAME = 63  # MongoDB: database names are shorter than 64 characters
# Index creation may take long on a server holding many collections (one create_index passed
# 2 s with 10,000 tenants' collections on SecantusDB): it runs in the background, bounded by
# this, and is retried with backoff.
INDEX_TIMEOUT_S = 60.0
INDEX_RETRY_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


def answered_too_slowly(exc: BaseException) -> bool:
    """The database was reached but an operation did not finish in time: a smaller one may."""
    if isinstance(exc, DatabaseUnavailable):
        return exc.too_slow
    return isinstance(exc, NetworkTimeout | ExecutionTimeout)


def utc_now() -> datetime:
    """Now, at the millisecond precision BSON stores, so what we return is what we stored.
    (A float holds milliseconds of this era to within a microsecond, which `fromtimestamp`
    rounds to: the result is the millisecond exactly. One C call instead of two.)"""
    return datetime.fromtimestamp(time.time_ns() // 1_000_000 / 1000, UTC)


def tenant_database_name(database: str, tenant_id: str) -> str:
    """The database holding a tenant's tools with TOOL_COLLECTIONS=database_per_tenant:
    `<MONGODB_DATABASE>-<tenant_id>`, or, when that is longer than 62 characters, its first 46
    then `-` and 16 hex digits of its SHA-256 (63 characters: never equal to a direct name)."""
    name = f"{database}-{tenant_id}"
    if len(name) < MAX_DATABASE_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[:46]}-{digest}"


class _TopologyChecks(ServerHeartbeatListener):
    """When the driver last checked a server (a heartbeat that started, answered or failed):
    a client whose topology is stuck stops checking (liveness, app/services/health.py)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.at = clock()

    def started(self, event: ServerHeartbeatStartedEvent) -> None:
        self.at = self._clock()

    def succeeded(self, event: ServerHeartbeatSucceededEvent) -> None:
        self.at = self._clock()

    def failed(self, event: ServerHeartbeatFailedEvent) -> None:
        self.at = self._clock()


class Database:
    """Owns the client; hands out the shared collections and each tenant's tool collection."""

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        in_memory: bool,
        tool_placement: ToolPlacement = "one_database",
        url: str | None = None,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        topology: _TopologyChecks | None = None,
    ) -> None:
        self._client = client
        self.name = name
        self._db: AsyncDatabase[Document] = client[name]
        self.in_memory = in_memory
        self.tool_placement: ToolPlacement = tool_placement
        self._url = url
        self.timeout_s = timeout_s
        self._clock = clock
        self.circuit = Circuit(clock=clock)
        self._topology = topology
        self.answered_at = clock()  # when a driver call last completed (answer or error)
        self._declared: dict[str, list[IndexModel]] = {}
        self._unindexed: set[str] = set()  # declared collections whose indexes are pending
        self._partitions: set[str] = set()  # the in-memory store's partitions, indexed

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        placement = settings.tool_collections
        if settings.uses_memory_store:
            from mongomock_motor import AsyncMongoMockClient

            client: Any = AsyncMongoMockClient(tz_aware=True)
            return cls(client, settings.mongodb_database, in_memory=True, tool_placement=placement)
        timeout = settings.mongodb_timeout_ms
        topology = _TopologyChecks(time.monotonic)
        mongo: AsyncMongoClient[Document] = AsyncMongoClient(
            settings.mongodb_url,
            tz_aware=True,
            serverSelectionTimeoutMS=timeout,
            connectTimeoutMS=timeout,
            # A client-side operation timeout: a server that stops answering fails a request in
            # about `timeout`, never the driver's 30 s default.
            timeoutMS=timeout,
            # Acknowledge a write only once it is in the journal: a 201 must survive a crash
            # (without it, kill -9 right after a write lost the write in our fault test).
            journal=True,
            appname="toolgate",
            event_listeners=[topology],
        )
        return cls(
            mongo,
            settings.mongodb_database,
            in_memory=False,
            tool_placement=placement,
            url=settings.mongodb_url,
            timeout_s=timeout / 1000,
            topology=topology,
        )

    # Where records live.

    def declare(self, name: str, indexes: list[IndexModel]) -> None:
        """The indexes of a shared collection (each repository declares its own): created by
        `ensure_indexes`, or at once on the in-memory store."""
        self._declared[name] = indexes
        if self.in_memory:
            if name in _PARTITIONED:
                return  # each tenant's partition gets them when first used (`scoped`)
            self._embedded()[name].create_indexes(indexes)
        else:
            self._unindexed.add(name)

    def _embedded(self) -> Any:
        """The in-memory store's synchronous database (mongomock-motor's public `delegate`):
        its partitions get their indexes when first handed out, without an await."""
        database: Any = self._db
        return database.delegate

    def collection(self, name: str) -> AsyncCollection[Document]:
        """A shared collection, whole (lookups by something other than the tenant first)."""
        return self._db[name]

    def scoped(self, name: str, tenant_id: str) -> AsyncCollection[Document]:
        """The shared collection `name`, for one tenant's documents: every query on it filters
        on `tenant_id`. The in-memory store keeps each tenant's documents apart (mongomock
        scans a collection for every query and unique check: creates would grow with the
        number of tenants), with the same indexes."""
        if not self.in_memory:
            return self._db[name]
        partition = f"{name}.{tenant_id}"
        if partition not in self._partitions:
            self._embedded()[partition].create_indexes(self._declared.get(name, []))
            self._partitions.add(partition)
        return self._db[partition]

    def tool_database(self, tenant_id: str, placement: ToolPlacement | None = None) -> str:
        if (placement or self.tool_placement) == "one_database":
            return self.name
        return tenant_database_name(self.name, tenant_id)

    def tools(
        self, tenant_id: str, placement: ToolPlacement | None = None
    ) -> AsyncCollection[Document]:
        """The tenant's tool collection: `tools.<tenant_id>` in this database, or `tools` in
        the tenant's own database. A dot cannot occur in a tenant id."""
        placement = placement or self.tool_placement
        if placement == "one_database":
            return self._db[f"tools.{tenant_id}"]
        database: AsyncDatabase[Document] = self._client[self.tool_database(tenant_id, placement)]
        return database["tools"]

    def legacy(self, tenant_id: str, resource: str) -> AsyncCollection[Document]:
        """A collection of the layout before shared collections (`tenant.<id>.<resource>`),
        read only by the migration (app/repositories/migration.py)."""
        return self._db[f"tenant.{tenant_id}.{resource}"]

    async def collection_names(self, database: str | None = None) -> list[str]:
        """The collections of this database (or another): the migration and the namespace
        count (tests, the benchmark)."""
        target: AsyncDatabase[Document] = self._client[database] if database else self._db
        return sorted(await target.list_collection_names())

    async def database_names(self) -> list[str]:
        if self.in_memory:
            return [self.name]
        return sorted(await self._client.list_database_names())

    async def ensure_indexes(self) -> list[str]:
        """Create the declared indexes of every shared collection still pending (idempotent:
        one round trip for a collection whose indexes exist); the collections still pending."""
        for name in sorted(self._unindexed):
            try:
                with pymongo.timeout(INDEX_TIMEOUT_S):
                    await create_missing_indexes(self._db[name], self._declared[name])
            except PyMongoError as exc:
                logger.warning("indexes of %s: not created yet (%s)", name, exc)
                continue
            self._unindexed.discard(name)
        return sorted(self._unindexed)

    async def ensure_indexes_forever(
        self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        """`ensure_indexes` until every declared index exists, with backoff (never fatal: the
        service serves meanwhile; a unique index missing for a while is logged)."""
        for attempt in itertools.count():
            pending = await self.ensure_indexes()
            if not pending:
                return
            delay = INDEX_RETRY_DELAYS_S[min(attempt, len(INDEX_RETRY_DELAYS_S) - 1)]
            logger.warning("indexes of %s pending: retrying in %g s", ", ".join(pending), delay)
            await sleep(delay)

    # Every repository call.

    async def call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run one repository call (see the module's docstring)."""
        if self.in_memory:
            try:
                return await work
            except PyMongoError as exc:
                raise self.translate(exc) from exc
        try:
            self.circuit.refuse()
        except DatabaseUnavailable:
            work.close()
            raise
        try:
            return await self._detached(work)
        except PyMongoError as exc:
            raise self.translate(exc) from exc

    async def _detached(self, work: Coroutine[Any, Any, T]) -> T:
        """`work` in a task of its own: the caller may stop waiting (it is cancelled, a
        deadline passes), the driver call goes on to its own timeout, never cut half-way."""
        task = asyncio.ensure_future(work)
        task.add_done_callback(self._completed)
        return await asyncio.shield(task)

    def _completed(self, task: asyncio.Future[Any]) -> None:
        self.answered_at = self._clock()
        if not task.cancelled():
            task.exception()  # retrieved: a call whose caller left never warns unawaited

    def translate(self, exc: PyMongoError) -> DatabaseError:
        """The project's error for a driver error; an unreachable database opens the circuit."""
        if not _unavailable(exc):
            return DatabaseError()
        unreachable = self.unreachable(exc)
        if unreachable:
            self.circuit.open(type(exc).__name__, unreachable=True)
        return DatabaseUnavailable(unreachable=unreachable, too_slow=answered_too_slowly(exc))

    def unreachable(self, exc: BaseException) -> bool:
        """Whether `exc` says no server could be reached at all (refused, reset, unresolvable),
        rather than that one answered too slowly: a server that is up but slow still answers
        other clients. A failed server selection is "unreachable" only when the driver's last
        word from every server was such an error, not a timeout."""
        if isinstance(exc, DatabaseUnavailable):
            return exc.unreachable
        if not isinstance(exc, ConnectionFailure):
            return False
        if not isinstance(exc, ServerSelectionTimeoutError):
            return not exc.timeout
        topology = getattr(self._client, "topology_description", None)
        if topology is None:
            return True  # nothing known: nothing answered
        errors = [server.error for server in topology.server_descriptions().values()]
        return bool(errors) and all(
            error is not None and not getattr(error, "timeout", False) for error in errors
        )

    # Health.

    @property
    def topology_checked_at(self) -> float:
        """When the driver last checked a server (its heartbeats)."""
        return self._topology.at if self._topology is not None else self._clock()

    async def ping(self, *, timeout_s: float) -> str | None:
        """None when the database answers within the timeout, else why not (the caller logs
        it: a failing check repeats every second). Bounded by `pymongo.timeout`, never
        cancelled; the circuit follows the answer."""
        try:
            await self._detached(self._ping(timeout_s))
        except PyMongoError as exc:
            self.circuit.open(type(exc).__name__, unreachable=self.unreachable(exc))
            return type(exc).__name__
        self.circuit.close()
        return None

    async def _ping(self, timeout_s: float) -> None:
        with pymongo.timeout(timeout_s):
            await self._db.command("ping")

    async def fresh_ping(self, *, timeout_s: float) -> bool:
        """Whether a new client, with a topology of its own, reaches the database: when this
        process's client has stopped answering and a fresh one does, the client is wedged."""
        if self._url is None:
            return False
        millis = max(1, int(timeout_s * 1000))
        fresh: AsyncMongoClient[Document] = AsyncMongoClient(
            self._url,
            serverSelectionTimeoutMS=millis,
            connectTimeoutMS=millis,
            timeoutMS=millis,
            appname="toolgate-liveness",
        )
        try:
            with pymongo.timeout(timeout_s):
                await fresh.admin.command("ping")
            return True
        except PyMongoError:
            return False
        finally:
            await fresh.close()

    async def drop_database(self, name: str | None = None) -> None:
        await self._client.drop_database(name or self.name)

    async def close(self) -> None:
        result = self._client.close()
        if asyncio.iscoroutine(result):
            await result


# The shared collections that the in-memory store keeps per tenant (`Database.scoped`).
_PARTITIONED = frozenset(
    {
        "categories",
        "runs",
        "secrets",
        "mcp_servers",
        "model_providers",
        "approvals",
        "mcp_tool_settings",
    }
)


async def create_missing_indexes(collection: Any, indexes: list[IndexModel]) -> None:
    """Create those of `indexes` the collection lacks (by name): a start-up against an
    installation that has them all reads, and writes nothing (a createIndexes of existing
    indexes still queues behind the server's other work: SecantusDB took over 0.5 s)."""
    cursor = collection.list_indexes()
    if inspect.isawaitable(cursor):
        cursor = await cursor
    existing = {index["name"] for index in await cursor.to_list(None)}
    missing = [index for index in indexes if index.document["name"] not in existing]
    if missing:
        await collection.create_indexes(missing)


def _unavailable(exc: BaseException) -> bool:
    """Not reached, or no answer in time: worth a retry."""
    return isinstance(exc, ConnectionFailure | ExecutionTimeout | WaitQueueTimeoutError) or (
        isinstance(exc, PyMongoError) and exc.timeout
    )


def repository(cls: type[T]) -> type[T]:
    """Every public coroutine method of a repository class runs through `Database.call` (the
    instance's `_database`): bounded, never cancelled halfway, its errors the project's own."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _through_database(member))
    return cls


def _through_database(
    method: Callable[..., Coroutine[Any, Any, R]],
) -> Callable[..., Coroutine[Any, Any, R]]:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> R:
        database: Database = self._database
        return await database.call(method(self, *args, **kwargs))

    return call


async def aggregate(collection: Any, pipeline: list[Document]) -> list[Document]:
    """Run a pipeline on either driver: PyMongo async awaits `aggregate()`, Motor-shaped
    clients (the in-memory store) return the cursor directly."""
    cursor = collection.aggregate(pipeline)
    if inspect.isawaitable(cursor):
        cursor = await cursor
    return list(await cursor.to_list(None))
