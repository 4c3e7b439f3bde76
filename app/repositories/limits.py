"""Shared limits: one document per tenant and limit in the `limits` collection, changed only by
single atomic updates, so every replica on the database counts against the same numbers.

A limit document (`_id` like `chats:acme`):
- `t`: the bucket's theoretical arrival time in ms (GCRA, the token-bucket algorithm in one
  number): the bucket is full when `t <= now`; a grant of g tokens moves it g intervals on;
  tokens available now are `floor((now + burst - t) / interval)`.
- `l`: the concurrent-run leases, one entry per replica: `{r: replica, n: held, e: expiry, w:
  write}`. A replica renews its entry while it holds runs; an entry past its expiry (a crashed
  replica) counts for nothing and is dropped by the next update. `w` numbers the replica's
  writes: an update that reaches the database after a later one of the same replica (sent,
  timed out, and applied late) matches nothing and changes nothing, so a stale count never
  overwrites a newer one.
- `x`: when the document may go (a TTL index): past it the bucket is full and no lease is live,
  which is what a missing document means.

The replicas document (`_id` `replicas`) lists the live replicas, `l: [{r: replica, e:
expiry}]`, each renewing its entry: a replica counting on its own while the database is away
admits its share of each limit among those it last saw there.

A fence document (`_id` like `fence:tools:acme`) is a short lease on one tenant's object cap:
whoever holds it may count and insert (`h`: the holder, `e`: its expiry in ms).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pymongo
from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from app.errors import DatabaseError
from app.repositories.database import Database, Document, repository

UPSERT_TRIES = 3
# A limit check waits at most this long for the database (LIMITS_CHECK_TIMEOUT_S); past it the
# caller counts on its own (app/services/shared_limits.py). Admission is on every chat's path.
CHECK_TIMEOUT_S = 0.5
REPLICAS_ID = "replicas"
KEEP_MS = 60_000  # how long an idle document stays past the point where it means nothing


@dataclass(frozen=True)
class Bucket:
    """A token bucket: `burst` tokens, one back every `interval_ms`; interval 0: no rate limit."""

    interval_ms: float
    burst: int

    @classmethod
    def per_minute(cls, rate: int) -> Bucket:
        return cls(60_000 / rate if rate > 0 else 0.0, rate)

    @property
    def tolerance_ms(self) -> float:
        return self.interval_ms * self.burst


@dataclass(frozen=True)
class Grant:
    granted: int
    spare: int  # set aside for this replica beyond what was asked
    tat_ms: float  # the bucket after the update

    def tokens_left(self, bucket: Bucket, now_ms: float) -> float:
        if bucket.interval_ms <= 0:
            return float("inf")
        return (now_ms + bucket.tolerance_ms - self.tat_ms) / bucket.interval_ms


def _live_others(replica: str, now_ms: float) -> dict[str, Any]:
    """The lease entries of other replicas that have not expired."""
    return {
        "$filter": {
            "input": {"$ifNull": ["$l", []]},
            "cond": {"$and": [{"$ne": ["$$this.r", replica]}, {"$gt": ["$$this.e", now_ms]}]},
        }
    }


def _own(
    replica: str, held: Any, expires_ms: float, write: int | None, **grant: Any
) -> dict[str, Any]:
    """This replica's entry as a one-element list, or an empty list when it holds nothing.
    `grant`: what an admission granted (`g`, `s`), kept so a retry can find it."""
    entry = {"r": replica, "n": held, "e": expires_ms, "w": write, **grant}
    return {"$cond": [{"$gt": [held, 0]}, [entry], []]}


def _not_stale(key: str, replica: str, write: int | None) -> Document:
    """The document unless it holds a write of this replica numbered `write` or later."""
    if write is None:
        return {"_id": key}
    return {"_id": key, "l": {"$not": {"$elemMatch": {"r": replica, "w": {"$gte": write}}}}}


def _bucket_time(now_ms: float, *, returned_ms: float, charged_ms: float) -> dict[str, Any]:
    """The bucket's time with `returned_ms` given back and `charged_ms` taken: tokens a replica
    admitted on its own are charged on a bucket no fuller than full (`t` at least now)."""
    given_back = {"$subtract": [{"$ifNull": ["$t", now_ms]}, returned_ms]}
    return {"$add": [{"$max": [given_back, now_ms]}, charged_ms]}


@repository
class LimitRepository:
    def __init__(self, database: Database, *, check_timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self._database = database
        self._collection: Any = database.collection("limits")
        self._timeout_s = check_timeout_s
        database.declare("limits", [IndexModel([("x", ASCENDING)], expireAfterSeconds=0)])

    async def admit(
        self,
        key: str,
        *,
        want: int,
        bucket: Bucket,
        cap: int,
        replica: str,
        held: int,
        now_ms: float,
        lease_ms: float,
        spare: int = 0,
        headroom: int = 0,
        returned: int = 0,
        charged: int = 0,
        write: int | None = None,
    ) -> Grant:
        """Grant up to `want` runs in one atomic update: limited by the bucket's tokens and by
        `cap` minus every live lease (cap 0: no cap). This replica's lease is written as `held`
        (its runs in progress) plus what this update grants, which also gives back its releases
        and spares since the last update; `returned` unused tokens go back to the bucket.

        Then, only while at least `headroom` tokens and slots would stay free for the other
        replicas, up to `spare` more are set aside for this replica (a token and a slot each):
        it admits that many more runs without a round trip.

        `charged` tokens this replica admitted on its own (the database away) are taken first.
        `write`: this replica's number for the update (see `w` above); a stale one raises."""
        counted: list[Any] = []
        if bucket.interval_ms > 0:
            available = {"$subtract": [now_ms + bucket.tolerance_ms, "$t"]}
            counted.append({"$floor": {"$divide": [available, bucket.interval_ms]}})
        if cap > 0:
            others = {"$sum": {"$map": {"input": "$l", "in": "$$this.n"}}}
            counted.append({"$subtract": [cap - held, others]})
        free: Any = {"$min": counted} if counted else want + spare + headroom
        after = {"$subtract": [{"$subtract": ["$f", "$g"]}, headroom]}
        pipeline: list[Document] = [
            {
                "$set": {
                    "t": _bucket_time(
                        now_ms,
                        returned_ms=returned * bucket.interval_ms,
                        charged_ms=charged * bucket.interval_ms,
                    ),
                    "l": _live_others(replica, now_ms),
                }
            },
            {"$set": {"f": free}},
            {"$set": {"g": {"$max": [0, {"$min": [want, "$f"]}]}}},
            {"$set": {"s": {"$max": [0, {"$min": [spare, after]}]}}},
            {
                "$set": {
                    "t": {
                        "$add": [
                            "$t",
                            {"$multiply": [{"$add": ["$g", "$s"]}, bucket.interval_ms]},
                        ]
                    },
                    "l": {
                        "$concatArrays": [
                            "$l",
                            _own(
                                replica,
                                {"$add": [held, "$g", "$s"]},
                                now_ms + lease_ms,
                                write,
                                g="$g",
                                s="$s",
                            ),
                        ]
                    },
                    "x": _expiry(now_ms + bucket.tolerance_ms + lease_ms),
                }
            },
            {"$unset": "f"},
        ]
        doc = await self._upsert(
            _not_stale(key, replica, write), pipeline, projection={"g": 1, "s": 1, "t": 1}
        )
        return Grant(granted=int(doc["g"]), spare=int(doc["s"]), tat_ms=float(doc["t"]))

    async def _upsert(
        self, query: Document, pipeline: list[Document], *, projection: Document
    ) -> Document:
        """The update, retried when two replicas created the document at once (one insert wins;
        the other sees a duplicate key, or on some servers no document): then it exists. A
        stale write (see `w`) sees a duplicate key every time, and raises. Before a retry, an
        admission whose update went through after all (SecantusDB can apply it and still answer
        no document) is found by its write number: its grant, never a second one."""
        for attempt in range(UPSERT_TRIES):
            if attempt and (applied := await self._applied(query)) is not None:
                return applied
            try:
                with pymongo.timeout(self._timeout_s):
                    doc: Document | None = await self._collection.find_one_and_update(
                        query,
                        pipeline,
                        upsert=True,
                        projection=projection,
                        return_document=ReturnDocument.AFTER,
                    )
            except DuplicateKeyError:
                continue
            if doc is not None:
                return doc
        raise DatabaseError(f"the limit document {query['_id']!r} could not be created or updated")

    async def _applied(self, query: Document) -> Document | None:
        """What this replica's admission numbered as in `query` granted, if it went through."""
        guard = query.get("l")
        if guard is None:
            return None
        mine = guard["$not"]["$elemMatch"]
        with pymongo.timeout(self._timeout_s):
            doc: Document | None = await self._collection.find_one(
                {
                    "_id": query["_id"],
                    "l": {"$elemMatch": {"r": mine["r"], "w": mine["w"]["$gte"]}},
                },
                projection={"t": 1, "l": 1},
            )
        if doc is None:
            return None
        entry = next(e for e in doc["l"] if e["r"] == mine["r"])
        return {"g": entry.get("g", 0), "s": entry.get("s", 0), "t": doc.get("t", 0.0)}

    async def sync_lease(
        self,
        key: str,
        *,
        replica: str,
        held: int,
        now_ms: float,
        lease_ms: float,
        returned_ms: float = 0.0,
        charged_ms: float = 0.0,
        write: int | None = None,
    ) -> None:
        """Write this replica's count of runs held and renew its lease (drop it at 0); give back
        `returned_ms` of the bucket (unused spare tokens), take `charged_ms` (tokens admitted on
        its own)."""
        pipeline: list[Document] = [
            {
                "$set": {
                    "t": _bucket_time(now_ms, returned_ms=returned_ms, charged_ms=charged_ms),
                    "l": {
                        "$concatArrays": [
                            _live_others(replica, now_ms),
                            _own(replica, held, now_ms + lease_ms, write),
                        ]
                    },
                    "x": {"$max": ["$x", _expiry(now_ms + lease_ms)]},  # never shortened
                }
            }
        ]
        with pymongo.timeout(self._timeout_s):
            await self._collection.update_one(
                _not_stale(key, replica, write), pipeline, upsert=True
            )

    async def heartbeat(self, *, replica: str, now_ms: float, lease_ms: float) -> list[str]:
        """Renew this replica's entry in the replicas document; the live replicas (itself
        included)."""
        pipeline: list[Document] = [
            {
                "$set": {
                    "l": {
                        "$concatArrays": [
                            _live_others(replica, now_ms),
                            [{"r": replica, "e": now_ms + lease_ms}],
                        ]
                    },
                    "x": _expiry(now_ms + lease_ms),
                }
            }
        ]
        doc = await self._upsert({"_id": REPLICAS_ID}, pipeline, projection={"l.r": 1})
        return [str(entry["r"]) for entry in doc["l"]]

    async def take_fence(self, key: str, *, holder: str, now_ms: float, ttl_ms: float) -> bool:
        """Hold the fence unless someone else holds it and has not expired."""
        try:
            await self._collection.update_one(
                {"_id": key, "e": {"$lt": now_ms}},
                {"$set": {"h": holder, "e": now_ms + ttl_ms, "x": _expiry(now_ms + ttl_ms)}},
                upsert=True,
            )
        except DuplicateKeyError:  # the document exists and its holder's time has not run out
            return False
        return True

    async def release_fence(self, key: str, *, holder: str) -> None:
        await self._collection.delete_one({"_id": key, "h": holder})


def _expiry(until_ms: float) -> datetime:
    return datetime.fromtimestamp(until_ms / 1000, UTC) + timedelta(milliseconds=KEEP_MS)
