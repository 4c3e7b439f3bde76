"""The run journal: run records on local disk until the database has them.

Each record is appended, as one orjson line, to the process's current segment file before the
answer it belongs to is sent. `os.write` puts it in the kernel's page cache: a process killed
with SIGKILL loses nothing that was written (the kernel writes it out later); only a crash of
the machine itself can, unless RUN_JOURNAL_FSYNC is on (an fsync per record, milliseconds each
on most disks). The recorder rotates to a fresh segment before each batch it writes to the
database and deletes a segment once every record in it is stored.

Several processes may share the directory (uvicorn workers, a restarted pod, every replica on
a volume they all mount): each holds an exclusive `flock` on the segments it writes, and a
process claims (and replays) only segments no live process holds, at start and then every
RUN_JOURNAL_ADOPT_S. The kernel releases a dead process's locks, whatever killed it; over NFS
(v4), the server releases those of a lost host when its lease runs out (90 s by default).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

from app.repositories.database import Document
from app.repositories.storable import storable

logger = logging.getLogger(__name__)
SUFFIX = ".jsonl"
READ_CHUNK = 500  # records per chunk when a segment is read back

Entry = tuple[str, Document]  # (tenant_id, record)


@dataclass(eq=False)
class Segment:
    path: Path
    fd: int  # open, holding the flock
    size: int = 0


def encode(tenant_id: str, run: Document) -> bytes | None:
    """One journal line; None for a record that no JSON can hold even reduced."""
    dates = [key for key, value in run.items() if isinstance(value, datetime)]
    for candidate in (run, None):
        try:
            body = run if candidate is not None else storable(run)
            return orjson.dumps({"t": tenant_id, "d": dates, "r": body}, default=str) + b"\n"
        except (orjson.JSONEncodeError, RecursionError, TypeError, ValueError):
            continue
    return None


def decode(line: bytes) -> Entry:
    item = orjson.loads(line)
    run: Document = item["r"]
    for key in item.get("d", ()):
        run[key] = datetime.fromisoformat(run[key])
    return str(item["t"]), run


class RunJournal:
    """Append-only segment files in one directory (RUN_JOURNAL_DIR), at most `max_bytes` in
    all for this process."""

    def __init__(self, directory: Path, *, max_bytes: int, fsync: bool = False) -> None:
        self._directory = directory
        self._max_bytes = max_bytes
        self._fsync = fsync
        self._current: Segment | None = None
        self._closed: list[Segment] = []  # rotated, not yet removed
        self._failing = False  # the last segment could not be started

    @property
    def size(self) -> int:
        """What this process holds on disk now (its open and rotated segments)."""
        current = self._current.size if self._current else 0
        return current + sum(segment.size for segment in self._closed)

    def open(self) -> list[Segment]:
        """Start a segment; claim the segments no live process holds (to be replayed)."""
        self._directory.mkdir(parents=True, exist_ok=True)
        orphans = self.adopt()
        self._current = self._new_segment()
        return orphans

    def adopt(self) -> list[Segment]:
        """Claim the segments no live process holds, oldest first: those of a process that
        died, here or on another host sharing the directory (a volume every replica mounts);
        the caller replays and removes them. This process's own are held: never claimed."""
        orphans = []
        for path in sorted(self._directory.glob(f"*{SUFFIX}"), key=_mtime):
            claimed = _claim(path)
            if claimed is not None:
                orphans.append(claimed)
        return orphans

    def append(self, line: bytes) -> bool:
        """Write one line to the current segment; False if it could not be (full, I/O error)."""
        segment = self._current
        if segment is None or self.size + len(line) > self._max_bytes:
            return False
        try:
            written = 0
            while written < len(line):  # a regular file writes all at once, barring errors
                written += os.write(segment.fd, line[written:])
            if self._fsync:
                os.fsync(segment.fd)
        except OSError as exc:
            logger.error("run journal: could not append to %s: %s", segment.path, exc)
            return False
        finally:
            segment.size += written
        return True

    def rotate(self) -> Segment | None:
        """Close the current segment to appends and start the next; the closed one is
        returned, to be removed once its records are stored."""
        closed = self._current
        try:
            self._current = self._new_segment()
            if self._failing:
                logger.warning("run journal: segments can be written again")
            self._failing = False
        except OSError as exc:  # records wait in memory only until a segment can be started
            if not self._failing:
                logger.error("run journal: could not start a segment: %s", exc)
            self._current, self._failing = None, True
        if closed is not None:
            self._closed.append(closed)
        return closed

    def read(self, segment: Segment) -> Iterator[list[Entry]]:
        """The segment's records, in chunks; a line that does not parse (the torn end of a
        machine crash) is skipped with a warning."""
        chunk: list[Entry] = []
        with segment.path.open("rb") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    chunk.append(decode(line))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    logger.warning("run journal: %s line %d is unreadable", segment.path, number)
                if len(chunk) >= READ_CHUNK:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk

    def let_go(self, segment: Segment) -> None:
        """Stop holding a claimed segment without removing it (its records are not stored
        yet: the next process to claim it replays it)."""
        self._release(segment)

    def remove(self, segment: Segment) -> None:
        with contextlib.suppress(OSError):
            segment.path.unlink()
        self._release(segment)

    def close(self) -> None:
        """Stop appending; an empty current segment is removed, the others stay for the next
        start to replay."""
        current, self._current = self._current, None
        if current is not None and current.size == 0:
            self.remove(current)
        elif current is not None:
            self._release(current)
        for segment in list(self._closed):
            self._release(segment)

    def _release(self, segment: Segment) -> None:
        with contextlib.suppress(OSError):
            os.close(segment.fd)
        if segment in self._closed:
            self._closed.remove(segment)

    def _new_segment(self) -> Segment:
        # Locked under a temporary name, then renamed: another process never sees it unlocked.
        name = uuid.uuid4().hex
        hidden = self._directory / f".{name}.tmp"
        fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = self._directory / f"{name}{SUFFIX}"
        os.rename(hidden, path)
        return Segment(path, fd)


def _claim(path: Path) -> Segment | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # removed meanwhile by its owner
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)  # a live process holds it
        return None
    return Segment(path, fd, os.fstat(fd).st_size)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
