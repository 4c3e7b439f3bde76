"""Run records: written off the response path, never dropped while the database is away.

`record()` runs before the answer's last byte: it appends the record to the local journal
(app/repositories/run_journal.py; a `write` to the page cache, so `kill -9` loses nothing) and
queues it in memory. One background task writes the queue to the database in batches, retrying
with backoff for as long as the database is unavailable, and removes each journal segment once
its records are stored. Past the memory bound (RUN_QUEUE_MAX_RECORDS, RUN_QUEUE_MAX_BYTES) the
records are only on disk: the writer reads them back when the database returns. Segments left
by a process that died are replayed at start. Writes are idempotent (the record's `_id` is its
`run_id`), so a record written twice, around a crash, is stored once.

What is still lost (the journal is off, full or failing, and memory is full; or the database
refuses a record outright) is counted (`toolgate_run_records_lost`) and logged as an ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from app.errors import database_unavailable
from app.repositories.database import Document, answered_too_slowly
from app.repositories.run_journal import RunJournal, Segment, encode
from app.repositories.runs import RunStore

logger = logging.getLogger(__name__)

BATCH_SIZE = 500
MIN_CHUNK = 10  # a batch that times out is split in halves down to this
# Collect records this long before writing: one wake-up and one insert per tenant per batch,
# rather than per chat.
BATCH_WINDOW_S = 0.05
# Waits between tries while the database is unavailable; the last one repeats, without end.
RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
REPORT_EVERY_S = 60.0  # while the database stays away, one "still waiting" line this often
UNENCODED_SIZE = 1024  # the size counted for a record without a journal line (journal off)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class _Queued:
    tenant_id: str
    run: Document
    size: int
    journaled: bool


class RunRecorder:
    """Queues run documents and writes them in batches from one background task.

    A chat never waits for the database and never fails because of its record. `close()`
    tries once more to write what is queued; what the database does not take stays in the
    journal for the next start.
    """

    def __init__(
        self,
        runs: RunStore,
        *,
        journal: RunJournal | None = None,
        max_records: int = 100_000,
        max_bytes: int = 64 * 1_048_576,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        lost: Callable[[int], None] = lambda count: None,
        adopt_every_s: float = 0.0,
    ) -> None:
        self._runs = runs
        self._adopt_every_s = adopt_every_s
        self._journal = journal
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._sleep = sleep
        self._clock = clock
        self._count_lost = lost
        self._queue: deque[_Queued] = deque()
        self._held_records = 0  # queued or being written: what the memory bound counts
        self._held_bytes = 0
        self._spilled = False  # the current segment holds records that are not in memory
        self._orphans: list[Segment] = []
        self._task: asyncio.Task[None] | None = None
        self._adopter: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()  # shutdown: one last try per batch, no more waiting
        self._lost_unlogged = 0
        self._lost_logged_at: float | None = None
        self._unavailable_since: float | None = None
        self._reported_at = 0.0

    @property
    def held(self) -> int:
        """Records in memory, not yet stored."""
        return self._held_records

    @property
    def journal_bytes(self) -> int:
        return self._journal.size if self._journal else 0

    def start(self) -> None:
        if self._journal is not None:
            try:
                self._orphans = self._journal.open()
            except OSError as exc:
                logger.error("run journal unusable (%s): records are kept in memory only", exc)
                self._journal = None
        if self._orphans:
            logger.info(
                "replaying %d run journal segment(s) of a stopped process", len(self._orphans)
            )
        self._task = asyncio.create_task(self._write_forever(), name="run-recorder")
        if self._journal is not None and self._adopt_every_s > 0:
            self._adopter = asyncio.create_task(self._adopt_forever(), name="run-journal: adopt")

    def record(self, run: dict[str, Any], *, tenant_id: str) -> None:
        """Journal the record (before the answer completes) and queue it for the database."""
        line = encode(tenant_id, run) if self._journal is not None else None
        journaled = line is not None and self._journal is not None and self._journal.append(line)
        size = len(line) if line is not None else UNENCODED_SIZE
        if journaled and self._spilled:
            pass  # read back from the segment with the rest of it
        elif self._room_for(size):
            self._queue.append(_Queued(tenant_id, run, size, journaled))
            self._held_records += 1
            self._held_bytes += size
        elif journaled:
            self._spilled = True
        else:
            self._lose(1, "memory queue full and no journal to spill to")
            return
        self._wake.set()

    async def close(self) -> None:
        if self._task is None:
            return
        self._closing.set()
        self._wake.set()
        if self._adopter is not None:
            await self._adopter  # it only waits between looks: it returns at once
        await self._task
        if self._journal is not None:
            for orphan in self._orphans:  # claimed, not replayed: the next claimant does it
                self._journal.let_go(orphan)
            self._journal.close()
        if self._lost_unlogged:
            logger.error("%d run record(s) lost since the last report", self._lost_unlogged)

    def _room_for(self, size: int) -> bool:
        return self._held_records < self._max_records and self._held_bytes + size <= self._max_bytes

    def _lose(self, count: int, why: str) -> None:
        """Count; log an ERROR at once, then at most one per REPORT_EVERY_S with the count."""
        self._count_lost(count)
        self._lost_unlogged += count
        now = self._clock()
        if self._lost_logged_at is None or now - self._lost_logged_at >= REPORT_EVERY_S:
            logger.error("%d run record(s) lost: %s", self._lost_unlogged, why)
            self._lost_logged_at, self._lost_unlogged = now, 0

    async def _write_forever(self) -> None:
        await self._replay_orphans()
        while not self._closing.is_set():
            await self._wake.wait()
            await self._pause(BATCH_WINDOW_S)
            self._wake.clear()
            await self._replay_orphans()
            await self._flush()
        await self._flush()

    async def _replay_orphans(self) -> None:
        """Store the records of the segments claimed from stopped processes, and remove them."""
        while self._orphans and not self._closing.is_set():
            orphan = self._orphans[0]
            if not await self._replay(orphan) or self._journal is None:
                return  # shutdown came first: let go of it at close
            self._journal.remove(orphan)
            self._orphans.pop(0)

    async def _adopt_forever(self) -> None:
        """Every `adopt_every_s`, claim the segments of processes that stopped meanwhile (a
        replica killed on another host that shares the journal's volume) for the writer."""
        while not self._closing.is_set():
            await self._pause(self._adopt_every_s)
            if self._closing.is_set() or self._journal is None:
                return
            try:
                found = self._journal.adopt()
            except OSError as exc:
                logger.error("run journal: could not look for stopped processes' segments: %s", exc)
                continue
            if found:
                logger.warning(
                    "adopting %d run journal segment(s) of a process that stopped", len(found)
                )
                self._orphans.extend(found)
                self._wake.set()

    async def _flush(self) -> None:
        """Write what was recorded up to now: the memory queue, and the segment behind it if
        part of it was only on disk; then remove the segment."""
        segment = self._journal.rotate() if self._journal is not None else None
        spilled, self._spilled = self._spilled, False
        batch = list(self._queue)
        self._queue.clear()
        # A spilled segment is read back whole: its journaled records are not written twice.
        wanted = [item for item in batch if not (spilled and item.journaled)]
        stored = await self._write_all(wanted)
        self._release(batch)
        if spilled and segment is not None:
            stored = await self._replay(segment) and stored
        if segment is not None and self._journal is not None:
            if stored:
                self._journal.remove(segment)
            else:
                unjournaled = sum(1 for item in wanted if not item.journaled)
                if unjournaled:
                    self._lose(unjournaled, "shutdown before the database took them")
        elif not stored:
            self._lose(len(wanted), "shutdown before the database took them (no journal)")

    def _release(self, batch: Iterable[_Queued]) -> None:
        for item in batch:
            self._held_records -= 1
            self._held_bytes -= item.size

    async def _write_all(self, items: list[_Queued]) -> bool:
        """True once every item is stored (or refused for good); False only at shutdown."""
        by_tenant: dict[str, list[Document]] = defaultdict(list)
        for item in items:
            by_tenant[item.tenant_id].append(item.run)
        stored = True
        for tenant_id, runs in by_tenant.items():
            for start in range(0, len(runs), BATCH_SIZE):
                chunk = runs[start : start + BATCH_SIZE]
                stored = await self._write_tenant(tenant_id, chunk) and stored
        return stored

    async def _replay(self, segment: Segment) -> bool:
        if self._journal is None:
            return False
        stored = True
        try:
            for chunk in self._journal.read(segment):
                by_tenant: dict[str, list[Document]] = defaultdict(list)
                for tenant_id, run in chunk:
                    by_tenant[tenant_id].append(run)
                for tenant_id, runs in by_tenant.items():
                    stored = await self._write_tenant(tenant_id, runs) and stored
        except OSError as exc:
            logger.error("run journal: could not read %s back: %s", segment.path, exc)
            return False
        return stored

    async def _write_tenant(self, tenant_id: str, runs: list[Document]) -> bool:
        """Write, retrying for as long as the database is unreachable or slow. False only when
        shutdown ends the waiting; a record the database refuses is logged and counted."""
        attempt = 0
        while True:
            try:
                await self._runs.insert_many(runs, tenant_id=tenant_id)
                self._recovered()
                return True
            except Exception as exc:  # a record is never worth a failed chat
                if not database_unavailable(exc):
                    self._lose(len(runs), f"the database refused them ({type(exc).__name__})")
                    return True
                if self._closing.is_set():
                    return False
                if answered_too_slowly(exc) and len(runs) >= 2 * MIN_CHUNK:
                    # Back, but slow (or catching up): smaller writes finish within the timeout.
                    half = len(runs) // 2
                    first = await self._write_tenant(tenant_id, runs[:half])
                    return first and await self._write_tenant(tenant_id, runs[half:])
                delay = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
                self._unavailable(exc, delay)
                attempt += 1
                await self._pause(delay)

    def _unavailable(self, exc: BaseException, delay: float) -> None:
        now = self._clock()
        if self._unavailable_since is None:
            self._unavailable_since = self._reported_at = now
        elif now - self._reported_at < REPORT_EVERY_S:
            return
        self._reported_at = now
        logger.warning(
            "run records: database unavailable for %.0f s (%s); %d record(s) held in memory, "
            "%d byte(s) in the journal; retrying in %g s",
            now - self._unavailable_since,
            type(exc).__name__,
            self._held_records,
            self.journal_bytes,
            delay,
        )

    def _recovered(self) -> None:
        if self._unavailable_since is not None:
            logger.warning(
                "run records: database back after %.0f s; writing what was held",
                self._clock() - self._unavailable_since,
            )
            self._unavailable_since = None

    async def _pause(self, delay: float) -> None:
        """Sleep (the injected sleep), cut short by shutdown."""
        if self._closing.is_set():
            return
        sleeper = asyncio.ensure_future(self._sleep(delay))
        closing = asyncio.ensure_future(self._closing.wait())
        await asyncio.wait({sleeper, closing}, return_when=asyncio.FIRST_COMPLETED)
        for task in (sleeper, closing):
            task.cancel()
