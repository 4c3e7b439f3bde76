"""The run recorder with an injected clock: no give-up while the database is away, a bounded
memory queue that spills to the journal, replay at start, and every loss counted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.errors import DatabaseError, DatabaseUnavailable
from app.repositories.run_journal import RunJournal, encode
from app.repositories.runs import MemoryRunRepository
from app.services.run_recorder import RunRecorder

OUTAGE_S = 300.0  # five minutes, ten times the old 30 s give-up


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class FlakyRuns(MemoryRunRepository):
    """The repository seam: unavailable until `up_at` on the fake clock; stores by `_id` as
    MongoDB does (a second insert of one record is ignored)."""

    def __init__(
        self, time: FakeTime, *, up_at: float, refuse: bool = False, most: int = 1_000_000
    ) -> None:
        super().__init__(limit=1_000_000)
        self.time = time
        self.up_at = up_at
        self.refuse = refuse
        self.most = most  # a larger write times out (a slow database)
        self.stored: dict[str, dict[str, Any]] = {}
        self.inserts = 0

    async def insert_many(self, runs: list[dict[str, Any]], *, tenant_id: str) -> None:
        if self.time.now < self.up_at:
            raise DatabaseUnavailable(unreachable=True)
        if self.refuse:
            raise DatabaseError()
        if len(runs) > self.most:
            raise DatabaseUnavailable(too_slow=True)
        self.inserts += 1
        for run in runs:
            self.stored.setdefault(run["run_id"], {**run, "tenant": tenant_id})


def run(index: int) -> dict[str, Any]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return {"run_id": f"{index:032x}", "started_at": now, "ended_at": now, "tool_calls": []}


async def until(check: Callable[[], bool], spins: int = 200_000) -> None:
    """Yield to the recorder until `check` holds (it only waits on the fake clock)."""
    for _ in range(spins):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("the recorder did not get there")


def segments(directory: Path, pattern: str = "*.jsonl") -> list[Path]:
    return list(directory.glob(pattern))


def recorder(runs: FlakyRuns, time: FakeTime, lost: list[int], **options: Any) -> RunRecorder:
    made = RunRecorder(runs, sleep=time.sleep, clock=time.clock, lost=lost.append, **options)
    made.start()
    return made


async def record_all(made: RunRecorder, first: int, count: int) -> None:
    for index in range(first, first + count):
        made.record(run(index), tenant_id="acme")
        if index % 50 == 0:
            await asyncio.sleep(0)  # the writer runs between chats, as in the service


async def test_no_record_is_given_up_however_long_the_database_is_away(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time, lost = FakeTime(), []
    runs = FlakyRuns(time, up_at=OUTAGE_S)
    made = recorder(runs, time, lost)
    await record_all(made, 0, 1000)
    await until(lambda: len(runs.stored) == 1000)
    assert time.now >= OUTAGE_S and lost == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "database unavailable" in caplog.text and "database back after" in caplog.text
    await made.close()


async def test_past_the_memory_bound_records_wait_in_the_journal(tmp_path: Path) -> None:
    time, lost = FakeTime(), []
    runs = FlakyRuns(time, up_at=OUTAGE_S)
    journal = RunJournal(tmp_path, max_bytes=10_000_000)
    made = recorder(runs, time, lost, journal=journal, max_records=100)
    await record_all(made, 0, 1000)
    assert made.held <= 100 and made.journal_bytes > 0
    await until(lambda: len(runs.stored) == 1000)
    assert lost == []
    await until(lambda: made.journal_bytes == 0)
    assert sorted(runs.stored) == [run(i)["run_id"] for i in range(1000)]
    await made.close()
    assert segments(tmp_path, "*") == []


async def test_the_byte_bound_holds_too(tmp_path: Path) -> None:
    time, lost = FakeTime(), []
    runs = FlakyRuns(time, up_at=OUTAGE_S)
    journal = RunJournal(tmp_path, max_bytes=10_000_000)
    line = len(encode("acme", run(0)) or b"")
    made = recorder(runs, time, lost, journal=journal, max_bytes=50 * line)
    await record_all(made, 0, 500)
    assert made.held <= 50
    await until(lambda: len(runs.stored) == 500)
    assert lost == []
    await made.close()


async def test_without_a_journal_what_the_memory_bound_refuses_is_counted_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time, lost = FakeTime(), []
    runs = FlakyRuns(time, up_at=OUTAGE_S)
    made = recorder(runs, time, lost, max_records=100)
    await record_all(made, 0, 150)
    assert sum(lost) == 50
    assert "run record(s) lost: memory queue full" in caplog.text
    await until(lambda: len(runs.stored) == 100)
    await made.close()


async def test_records_left_by_a_stopped_process_are_replayed_at_start(tmp_path: Path) -> None:
    time, lost = FakeTime(), []
    down = FlakyRuns(time, up_at=float("inf"))
    first = recorder(down, time, lost, journal=RunJournal(tmp_path, max_bytes=10_000_000))
    await record_all(first, 0, 40)
    await first.close()  # the database never came back: the journal keeps them
    assert lost == [] and down.stored == {}
    assert segments(tmp_path)

    time2 = FakeTime()
    up = FlakyRuns(time2, up_at=0)
    up.stored[run(3)["run_id"]] = run(3)  # written just before the stop: stored once
    second = recorder(up, time2, lost, journal=RunJournal(tmp_path, max_bytes=10_000_000))
    await until(lambda: len(up.stored) == 40)
    await until(lambda: len(segments(tmp_path)) == 1)  # only its own, empty one
    stored = up.stored[run(7)["run_id"]]
    assert stored["started_at"] == run(7)["started_at"]  # a date again, not a string
    await second.close()
    assert segments(tmp_path, "*") == []


async def test_a_live_processs_segments_are_not_taken(tmp_path: Path) -> None:
    time, lost = FakeTime(), []
    down = FlakyRuns(time, up_at=float("inf"))
    live = recorder(down, time, lost, journal=RunJournal(tmp_path, max_bytes=10_000_000))
    await record_all(live, 0, 10)
    other = RunJournal(tmp_path, max_bytes=10_000_000)
    assert other.open() == []  # every segment is locked by the live recorder
    other.close()
    await live.close()


async def test_a_record_the_database_refuses_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time, lost = FakeTime(), []
    runs = FlakyRuns(time, up_at=0, refuse=True)
    made = recorder(runs, time, lost)
    await record_all(made, 0, 3)
    await until(lambda: sum(lost) == 3)
    assert "the database refused them (DatabaseError)" in caplog.text
    await made.close()


async def test_a_batch_too_large_for_a_slow_database_is_written_in_smaller_parts() -> None:
    time, lost = FakeTime(), []
    runs = FlakyRuns(time, up_at=10.0, most=40)  # back after 10 s, and slow: 40 per write
    made = recorder(runs, time, lost)
    await record_all(made, 0, 600)
    await until(lambda: len(runs.stored) == 600)
    assert lost == []
    await made.close()


async def test_a_live_replica_adopts_a_dead_ones_journal_without_a_restart(
    tmp_path: Path,
) -> None:
    """RUN_JOURNAL_DIR on a volume every replica mounts: a replica killed during an outage
    leaves its segments there, unlocked (the kernel drops a dead process's locks); another one
    claims them at its next look (RUN_JOURNAL_ADOPT_S) and stores them when the database is
    back, though the dead one never starts again. The live one's own segments stay its own."""
    time, lost = FakeTime(), []
    runs = FlakyRuns(time, up_at=60.0)
    live = recorder(
        runs, time, lost, journal=RunJournal(tmp_path, max_bytes=10_000_000), adopt_every_s=10.0
    )
    await record_all(live, 0, 5)
    dead = RunJournal(tmp_path, max_bytes=10_000_000)
    assert dead.open() == []  # the live replica holds its own segments
    for index in range(100, 130):
        assert dead.append(encode("globex", run(index)))
    dead.close()  # killed: its segment stays, its lock goes with the process
    await until(lambda: len(runs.stored) == 35)  # adopted, then stored once the database is up
    assert {r["tenant"] for r in runs.stored.values()} == {"acme", "globex"}
    assert time.now >= 60.0 and lost == []
    await live.close()
    assert segments(tmp_path, "*") == []
